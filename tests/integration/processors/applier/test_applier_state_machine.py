"""The applier against real PostgreSQL under any delivery schedule.

Hypothesis builds a valid history the way the resolver does (positions 1..N per
stream, revisions counting up per item, a child depending on its parent's current
revision, a retirement on the item's own previous revision, a listing mapped onto an
active item's current revision, a shipping-policy version), then delivers it in an
arbitrary schedule: reordered, duplicated (also within one batch), redelivered whole
as after a crash before the ack, dependencies arriving late, random batch sizes.

After every batch, progress never moves backwards, equals the end of the contiguous
run of terminal outcomes, and never covers a position that was not delivered; every
projection row (item, mapping, policy version) is a state its aggregate really had,
with its dependencies applied. Once
every event has been delivered, the projection and progress equal the history applied
once in order, which the generator's own model of the resolver provides.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import psycopg
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from db.control.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from processors.applier.batch import DEFAULT_CONSUMER, Applier
from processors.applier.messages import RawMessage
from processors.applier.tallies import BatchResult
from schemas.codec import CODEC
from schemas.events import (
    AggregateRef,
    CatalogItemRetired,
    CatalogItemUpserted,
    Envelope,
    ListingMapped,
    ShippingPolicyVersioned,
)
from schemas.topics import EVENTS_TOPIC

TENANT = "applier-sm"  # its own tenant: other tests may share the database
CATALOGS = ("c1", "c2")
ITEM_IDS = ("i0", "i1", "i2", "i3", "i4")
AGGREGATE = "catalog_item"
MAPPING = "listing_mapping"
POLICY = "shipping_policy"
LISTING_IDS = ("L0", "L1", "L2")
POLICY_IDS = ("std", "exp")
DECISION = uuid.UUID(int=1)
TERMINAL = {"applied", "ignored_stale", "ignored_old_epoch"}
PRODUCT_TABLES = (
    "inbox, parked_dependency, parked_event, product_item, product_listing_mapping,"
    " product_shipping_policy_version, stream_progress, quarantine, consumer_offset"
)
T0 = datetime(2026, 1, 1, tzinfo=UTC)

Stream = tuple[str, str, int]
ItemKey = tuple[str, str, str]  # tenant, catalog, item (or listing, or policy)


@dataclass(frozen=True, slots=True)
class Row:
    """A product_item row as the applier should write it."""

    class_id: str
    status: str
    title: str
    parent_item_id: str | None
    attributes: dict[str, str]
    revision: int
    position: int


@dataclass(frozen=True, slots=True)
class MappingRow:
    """A product_listing_mapping row as the applier should write it."""

    item_id: str
    item_revision: int
    revision: int
    position: int


@dataclass(frozen=True, slots=True)
class PolicyRow:
    """A product_shipping_policy_version row as the applier should write it."""

    scope: str
    effective_from: datetime
    effective_to: datetime | None
    terms: dict[str, str]
    position: int


@dataclass(frozen=True, slots=True)
class History:
    """Events in the order the resolver accepted them, and what they add up to."""

    events: list[Envelope]
    # Every state each item had, by revision: what any projection row may show.
    states: dict[ItemKey, dict[int, Row]]
    final: dict[ItemKey, Row]
    ends: dict[Stream, int]
    # Every revision of each listing mapping, and every version of each policy (all
    # versions stay projected, so these are also what the projection ends with).
    mappings: dict[ItemKey, dict[int, MappingRow]]
    policies: dict[ItemKey, dict[int, PolicyRow]]

    def event_of(self, key: ItemKey, revision: int, type_: str = AGGREGATE) -> Envelope:
        return next(
            e
            for e in self.events
            if (e.tenant_id, e.catalog_id, e.aggregate.id) == key
            and e.aggregate.type == type_
            and e.aggregate.revision == revision
        )

    def final_mappings(self) -> dict[ItemKey, MappingRow]:
        return {key: by_rev[max(by_rev)] for key, by_rev in self.mappings.items()}


def domain_event(
    catalog: str,
    position: int,
    aggregate: AggregateRef,
    payload: ListingMapped | ShippingPolicyVersioned,
    *dependencies: AggregateRef,
) -> Envelope:
    return Envelope(
        tenant_id=TENANT,
        catalog_id=catalog,
        history_epoch=1,
        position=position,
        event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"{catalog}/{position}"),
        aggregate=aggregate,
        dependencies=dependencies,
        occurred_at=T0 + timedelta(seconds=position),
        payload=payload,
    )


@st.composite
def histories(draw: st.DrawFn) -> History:
    """One or two streams of item upserts (some under a parent), retirements, listing
    mappings and shipping-policy versions."""
    catalogs = draw(st.sampled_from([CATALOGS[:1], CATALOGS]))
    events: list[Envelope] = []
    states: dict[ItemKey, dict[int, Row]] = {}
    mappings: dict[ItemKey, dict[int, MappingRow]] = {}
    policies: dict[ItemKey, dict[int, PolicyRow]] = {}
    ends: dict[Stream, int] = {}
    for catalog in catalogs:
        items: dict[str, Row] = {}  # the resolver's current state of each item
        length = draw(st.integers(1, 14), label=f"events in {catalog}")
        for position in range(1, length + 1):
            kind = draw(st.integers(0, 5), label="kind")
            active = sorted(i for i, r in items.items() if r.status == "active")
            if kind == 4 and active:
                # The resolver maps only onto an active item, at its current revision.
                item = draw(st.sampled_from(active), label="map onto")
                listing = draw(st.sampled_from(LISTING_IDS), label="listing")
                revisions = mappings.setdefault((TENANT, catalog, listing), {})
                revision = len(revisions) + 1
                target = items[item].revision
                revisions[revision] = MappingRow(item, target, revision, position)
                events.append(
                    domain_event(
                        catalog,
                        position,
                        AggregateRef(type=MAPPING, id=listing, revision=revision),
                        ListingMapped(item_id=item, item_revision=target, decision_id=DECISION),
                        AggregateRef(type=AGGREGATE, id=item, revision=target),
                    )
                )
                continue
            if kind == 5:
                policy = draw(st.sampled_from(POLICY_IDS), label="policy")
                versions = policies.setdefault((TENANT, catalog, policy), {})
                version = len(versions) + 1
                start = T0 + timedelta(days=10 * version)
                # Windows one after another, as the resolver's exclusion constraint
                # requires of versions in one scope.
                versions[version] = PolicyRow(
                    draw(st.sampled_from(["DE", "AT"]), label="scope"),
                    start,
                    start + timedelta(days=10),
                    {"version": str(version)},
                    position,
                )
                version_row = versions[version]
                events.append(
                    domain_event(
                        catalog,
                        position,
                        AggregateRef(type=POLICY, id=policy, revision=version),
                        ShippingPolicyVersioned(
                            scope=version_row.scope,
                            effective_from=version_row.effective_from,
                            effective_to=version_row.effective_to,
                            terms=version_row.terms,
                            decision_id=DECISION,
                        ),
                    )
                )
                continue
            retiring = bool(items) and kind == 0
            if retiring:
                item = draw(st.sampled_from(sorted(items)), label="retire")
                revision = items[item].revision + 1
                items[item] = replace(
                    items[item], status="retired", revision=revision, position=position
                )
                payload: CatalogItemUpserted | CatalogItemRetired = CatalogItemRetired(
                    reason=f"retired at {position}"
                )
                dependencies: tuple[AggregateRef, ...] = (
                    AggregateRef(type=AGGREGATE, id=item, revision=revision - 1),
                )
            else:
                item = draw(st.sampled_from(ITEM_IDS), label="upsert")
                parents = sorted(i for i, r in items.items() if r.status == "active" and i != item)
                parent = (
                    draw(st.none() | st.sampled_from(parents), label="parent") if parents else None
                )
                revision = items[item].revision + 1 if item in items else 1
                items[item] = Row(
                    class_id=draw(st.sampled_from(["lamp", "desk"]), label="class"),
                    status="active",
                    title=f"{item} at {position}",
                    parent_item_id=parent,
                    attributes={"revision": str(revision), "stream": catalog},
                    revision=revision,
                    position=position,
                )
                row = items[item]
                payload = CatalogItemUpserted(
                    class_id=row.class_id,
                    status=row.status,
                    title=row.title,
                    parent_item_id=row.parent_item_id,
                    attributes=row.attributes,
                )
                dependencies = ()
                if parent is not None:
                    dependencies = (
                        AggregateRef(type=AGGREGATE, id=parent, revision=items[parent].revision),
                    )
            states.setdefault((TENANT, catalog, item), {})[revision] = items[item]
            events.append(
                Envelope(
                    tenant_id=TENANT,
                    catalog_id=catalog,
                    history_epoch=1,
                    position=position,
                    event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"{catalog}/{position}"),
                    aggregate=AggregateRef(type=AGGREGATE, id=item, revision=revision),
                    dependencies=dependencies,
                    occurred_at=T0 + timedelta(seconds=position),
                    payload=payload,
                )
            )
        ends[(TENANT, catalog, 1)] = length
    final = {key: by_revision[max(by_revision)] for key, by_revision in states.items()}
    return History(events, states, final, ends, mappings, policies)


class Observed:
    """What the product database holds, read on a separate autocommit connection."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def progress(self) -> dict[Stream, int]:
        rows = self.conn.execute(
            "SELECT tenant_id, catalog_id, history_epoch, position FROM stream_progress"
            " WHERE consumer = %s AND tenant_id = %s",
            (DEFAULT_CONSUMER, TENANT),
        ).fetchall()
        return {(t, c, int(e)): int(p) for t, c, e, p in rows}

    def counts(self) -> dict[Stream, tuple[int, int, int, int, int]]:
        rows = self.conn.execute(
            "SELECT tenant_id, catalog_id, history_epoch, applied_count, duplicate_count,"
            " parked_count, released_count, ignored_count FROM stream_progress"
            " WHERE consumer = %s AND tenant_id = %s",
            (DEFAULT_CONSUMER, TENANT),
        ).fetchall()
        return {(t, c, int(e)): (a, d, p, r, i) for t, c, e, a, d, p, r, i in rows}

    def inbox(self) -> dict[uuid.UUID, str]:
        rows = self.conn.execute(
            "SELECT event_id, outcome FROM inbox WHERE tenant_id = %s", (TENANT,)
        ).fetchall()
        return {event_id: outcome for event_id, outcome in rows}

    def inbox_rows(self) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM inbox WHERE tenant_id = %s", (TENANT,)
        ).fetchone()
        assert row is not None
        return int(row[0])

    def parked(self) -> set[uuid.UUID]:
        rows = self.conn.execute(
            "SELECT event_id FROM parked_event WHERE tenant_id = %s", (TENANT,)
        ).fetchall()
        return {r[0] for r in rows}

    def parked_dependencies(self) -> set[uuid.UUID]:
        rows = self.conn.execute(
            "SELECT event_id FROM parked_dependency WHERE tenant_id = %s", (TENANT,)
        ).fetchall()
        return {r[0] for r in rows}

    def items(self) -> dict[ItemKey, Row]:
        rows = self.conn.execute(
            "SELECT generation, tenant_id, catalog_id, item_id, class_id, status, title,"
            " parent_item_id, attributes, revision, position FROM product_item"
            " WHERE tenant_id = %s",
            (TENANT,),
        ).fetchall()
        found: dict[ItemKey, Row] = {}
        for generation, tenant, catalog, item, *rest in rows:
            assert generation == 1
            class_id, status, title, parent, attributes, revision, position = rest
            found[(tenant, catalog, item)] = Row(
                class_id, status, title, parent, attributes, int(revision), int(position)
            )
        return found

    def mappings(self) -> dict[ItemKey, MappingRow]:
        rows = self.conn.execute(
            "SELECT generation, tenant_id, catalog_id, listing_id, item_id, item_revision,"
            " decision_id, revision, position FROM product_listing_mapping"
            " WHERE tenant_id = %s",
            (TENANT,),
        ).fetchall()
        found: dict[ItemKey, MappingRow] = {}
        for generation, tenant, catalog, listing, item, item_rev, decision, rev, pos in rows:
            assert generation == 1 and decision == DECISION
            found[(tenant, catalog, listing)] = MappingRow(item, item_rev, rev, pos)
        return found

    def policies(self) -> dict[ItemKey, dict[int, PolicyRow]]:
        rows = self.conn.execute(
            "SELECT generation, tenant_id, catalog_id, policy_id, version, scope,"
            " effective_from, effective_to, terms, decision_id, position"
            " FROM product_shipping_policy_version WHERE tenant_id = %s",
            (TENANT,),
        ).fetchall()
        found: dict[ItemKey, dict[int, PolicyRow]] = {}
        for generation, tenant, catalog, policy, version, *rest in rows:
            scope, start, end, terms, decision, position = rest
            assert generation == 1 and decision == DECISION
            found.setdefault((tenant, catalog, policy), {})[version] = PolicyRow(
                scope, start, end, terms, position
            )
        return found

    def quarantined(self) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM quarantine WHERE tenant_id = %s", (TENANT,)
        ).fetchone()
        assert row is not None
        return int(row[0])


class Delivery:
    """Delivers events of one history to the applier and checks after every batch."""

    def __init__(self, history: History, applier: Applier, observed: Observed) -> None:
        self.history = history
        self.applier = applier
        self.observed = observed
        # Each event is one Kafka message: the same offset every time it is redelivered.
        self.messages = [
            RawMessage(
                EVENTS_TOPIC,
                CATALOGS.index(e.catalog_id),
                e.position - 1,
                None,
                CODEC.encode_value(e),
            )
            for e in history.events
        ]
        self.delivered: set[int] = set()
        self.deliveries = 0
        self.progress: dict[Stream, int] = dict.fromkeys(history.ends, 0)
        self.totals: Counter[str] = Counter()
        self.last_batch: list[int] = []
        self.parked: set[uuid.UUID] = set()

    def deliver(self, batch: Sequence[int]) -> BatchResult:
        result = self.applier.apply([self.messages[i] for i in batch])
        self.delivered.update(batch)
        self.deliveries += len(batch)
        self.last_batch = list(batch)
        for name in ("applied", "duplicates", "parked", "released", "ignored", "quarantined"):
            self.totals[name] += getattr(result, name)
        assert result.received == len(batch)
        assert result.quarantined == 0
        # What the examples exercised, for --hypothesis-show-statistics.
        if len(set(batch)) < len(batch):
            event("an event twice in one batch")
        if result.parked:
            event("events parked")
        if result.ignored:
            event("stale events ignored")
        self.check(result)
        return result

    def redeliver_last_batch(self) -> None:
        """What Kafka does after a crash between COMMIT and the offset commit."""
        before = self.snapshot()
        batch = self.last_batch
        result = self.deliver(batch)
        assert result.duplicates == len(batch)
        assert (result.applied, result.parked, result.released, result.ignored) == (0, 0, 0, 0)
        assert self.snapshot() == before
        event("a committed batch redelivered")

    def snapshot(self) -> tuple[object, ...]:
        o = self.observed
        return (o.items(), o.mappings(), o.policies(), o.progress(), o.inbox(), o.parked())

    def check(self, result: BatchResult) -> None:
        history, o = self.history, self.observed
        by_position = {(e.catalog_id, e.position): e for e in history.events}
        delivered_ids = {history.events[i].event_id for i in self.delivered}
        inbox = o.inbox()
        progress = o.progress()

        # Every delivered event was committed with an outcome, and nothing else was.
        assert set(inbox) == delivered_ids
        assert o.inbox_rows() == len(delivered_ids)
        # Parked exactly when the inbox says so, with its dependency rows.
        parked = {i for i, outcome in inbox.items() if outcome == "parked"}
        assert o.parked() == parked
        assert o.parked_dependencies() == parked
        released = [e for e in history.events if e.event_id in self.parked - parked]
        if released:
            event("stored parked events released")
        if any(e.aggregate.type == MAPPING for e in released):
            event("a parked listing mapping released")
        released_aggregates = {(e.catalog_id, e.aggregate.id) for e in released}
        if any(
            (e.catalog_id, d.id) in released_aggregates for e in released for d in e.dependencies
        ):
            event("a release cascaded through stored parked events")
        self.parked = parked

        for stream, end in history.ends.items():
            _, catalog, _ = stream
            now = progress.get(stream, 0)
            assert now >= self.progress[stream], f"progress of {stream} moved backwards"
            if stream in result.progress:
                assert result.progress[stream] == now
            # Progress is the end of the contiguous run of terminal outcomes: it covers
            # only delivered, terminal positions, and stops at the first other one.
            run = 0
            while run < end and inbox.get(by_position[(catalog, run + 1)].event_id) in TERMINAL:
                run += 1
            assert now == run, f"progress of {stream} is {now}, contiguous run ends at {run}"
            self.progress[stream] = now

        # Each row is a state the item really had, and what it depends on is applied.
        items = o.items()
        for key, row in items.items():
            assert row == history.states[key].get(row.revision), f"{key} shows a state it never had"
            origin = history.event_of(key, row.revision)
            assert inbox.get(origin.event_id) == "applied"
            for dep in origin.dependencies:
                dep_row = items.get((key[0], key[1], dep.id))
                assert dep_row is not None and dep_row.revision >= dep.revision, (
                    f"{key} r{row.revision} applied before {dep.id} r{dep.revision}"
                )
        # Likewise each mapping, which is never there before its item revision is; and
        # each policy version.
        for key, mapping in o.mappings().items():
            assert mapping == history.mappings[key].get(mapping.revision), f"{key} never was"
            origin = history.event_of(key, mapping.revision, MAPPING)
            assert inbox.get(origin.event_id) == "applied"
            target = items.get((key[0], key[1], mapping.item_id))
            assert target is not None and target.revision >= mapping.item_revision, (
                f"{key} r{mapping.revision} applied before its item r{mapping.item_revision}"
            )
        for key, versions in o.policies().items():
            for version, policy in versions.items():
                assert policy == history.policies[key][version]
                origin = history.event_of(key, version, POLICY)
                assert inbox.get(origin.event_id) == "applied"

    def check_converged(self) -> None:
        """Everything was delivered: the result of applying the history once in order."""
        history, o = self.history, self.observed
        n = len(history.events)
        assert self.delivered == set(range(n))
        assert o.items() == history.final
        assert o.mappings() == history.final_mappings()
        assert o.policies() == history.policies
        assert o.progress() == history.ends
        assert o.parked() == set() and o.parked_dependencies() == set()
        inbox = o.inbox()
        assert o.inbox_rows() == n
        assert set(inbox) == {e.event_id for e in history.events}
        assert set(inbox.values()) <= TERMINAL
        assert o.quarantined() == 0

        # Each event reached one terminal outcome once, either when it arrived or when
        # it was released; every other delivery was a duplicate.
        t = self.totals
        assert t["applied"] + t["ignored"] == n
        assert t["parked"] == t["released"]
        assert t["duplicates"] == self.deliveries - n
        counts = o.counts()
        assert counts.keys() == history.ends.keys()
        summed = [sum(c[k] for c in counts.values()) for k in range(5)]
        assert summed == [t["applied"], t["duplicates"], t["parked"], t["released"], t["ignored"]]


def reset_product(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {PRODUCT_TABLES}")


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories(), data=st.data())
def test_any_delivery_schedule_converges_to_the_history_applied_once_in_order(
    clean_db: DatabaseSettings, history: History, data: st.DataObject
) -> None:
    reset_product(clean_db.product_dsn)  # clean_db runs once per test, not per example
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as control:
        for catalog in CATALOGS:
            ensure_epoch(control, TENANT, catalog)
    epochs = EpochSource(clean_db.control_dsn)
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    n = len(history.events)
    indices = st.integers(0, n - 1)
    try:
        with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
            delivery = Delivery(history, applier, Observed(conn))

            # Anything goes: any events, repeats, redelivery of a committed batch.
            for _ in range(data.draw(st.integers(0, 12), label="random batches")):
                redeliver = bool(delivery.last_batch) and data.draw(
                    st.booleans(), label="redeliver"
                )
                if redeliver:
                    delivery.redeliver_last_batch()
                    continue
                batch = data.draw(st.lists(indices, min_size=1, max_size=6), label="batch")
                if data.draw(st.booleans(), label="repeat within batch"):
                    again = data.draw(st.sampled_from(batch), label="repeated")
                    batch.insert(data.draw(st.integers(0, len(batch))), again)
                delivery.deliver(batch)

            # Then whatever is still missing, in any order and batch sizes, with
            # already delivered events mixed in.
            rest = [i for i in range(n) if i not in delivery.delivered]
            rest = data.draw(st.permutations(rest), label="the rest in order")
            while rest:
                size = data.draw(st.integers(1, 4), label="batch size")
                batch, rest = list(rest[:size]), rest[size:]
                if delivery.delivered:
                    old = data.draw(
                        st.lists(st.sampled_from(sorted(delivery.delivered)), max_size=2),
                        label="delivered before, again",
                    )
                    batch += old
                delivery.deliver(batch)

            delivery.check_converged()
    finally:
        applier.close()
        epochs.close()
