#!/bin/sh
# One KRaft node (broker and controller), configured as infra/local/kafka.py
# configures the local one. The broker listens on KAFKA_LISTEN:KAFKA_PORT and tells
# clients to come back at KAFKA_ADVERTISED: the address the host reaches it at. The
# storage is formatted at first start (--standalone: a one-voter quorum).
set -eu
data=/var/lib/kafka/data
config=/var/lib/kafka/server.properties
controller="127.0.0.1:$KAFKA_CONTROLLER_PORT"
cat > "$config" <<PROPERTIES
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=$controller
listeners=PLAINTEXT://$KAFKA_LISTEN:$KAFKA_PORT,CONTROLLER://$controller
advertised.listeners=PLAINTEXT://$KAFKA_ADVERTISED,CONTROLLER://$controller
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$data
num.partitions=6
auto.create.topics.enable=false
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
PROPERTIES
java() {
    exec_or_run=$1; shift
    $exec_or_run /usr/bin/java -Xms256m -Xmx512m -cp '/opt/kafka/libs/*' \
        -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties \
        -Dgapless.kafka.log=/dev/stdout "$@"
}
if [ ! -s "$data/meta.properties" ]; then
    # A cluster id is a random UUID in URL-safe base64 without padding, as
    # `kafka-storage random-uuid` makes it (without a second JVM start).
    cluster=$(python3 -c 'import base64, uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')
    java "" kafka.tools.StorageTool format --standalone -t "$cluster" -c "$config" > /dev/null
fi
java exec kafka.Kafka "$config"
