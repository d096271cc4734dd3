"""``gapless bench peers``: our relay against Debezium's outbox EventRouter on Kafka
Connect, and our agents against pyeventsourcing's ProjectionRunner, on the same
PostgreSQL cluster and Kafka broker in the bench's sandbox.

``connect`` launches Kafka Connect with Debezium; ``twin_outbox`` writes the same
committed rows into both outboxes; ``topic_reader`` reads what arrived; ``debezium``
measures the relay against Debezium; ``agents_side`` and ``eventsourcing_peer`` the two
projections; ``run`` is the phase and ``report`` its JSON object and table.
"""
