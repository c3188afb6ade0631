//! The store's values as the API's wire types ([`fleetsync_api::wire`]): the one
//! place where what the store keeps becomes what clients read.

use fleetsync_api::{ApplyResult, Member, ReportResult};
use fleetsync_store::{ApplyOutcome, LiveOutcome};

pub fn apply_result(o: ApplyOutcome) -> ApplyResult {
    ApplyResult {
        kind: o.kind,
        tenant: o.tenant,
        name: o.name,
        generation: o.generation,
        result: o.result.to_string(),
        enqueued: o.enqueued,
        warnings: Vec::new(),
        staged: None,
    }
}

/// A live member with the number of shards it owns.
pub fn member(member: fleetsync_store::Member, shards: usize) -> Member {
    Member { member, shards }
}

pub fn report_result(o: LiveOutcome) -> ReportResult {
    match o {
        LiveOutcome::Stored => ReportResult::Stored,
        LiveOutcome::Duplicate => ReportResult::Duplicate,
        LiveOutcome::Stale => ReportResult::Stale,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::{Kind, Timestamp};

    /// The store's own serialization and the wire type's must agree field for field,
    /// so that clients read what the server used to send.
    fn same_json<A: serde::Serialize, B: serde::Serialize>(store: &A, wire: &B) {
        assert_eq!(serde_json::to_value(store).expect("store value"), serde_json::to_value(wire).expect("wire value"));
    }

    #[test]
    fn wire_types_serialize_as_the_store_values_did() {
        let o = ApplyOutcome {
            kind: Kind::SyncSet,
            tenant: "t".into(),
            name: "n".into(),
            generation: 2,
            result: "updated",
            enqueued: 3,
        };
        same_json(&o, &apply_result(o.clone()));
        let m = fleetsync_store::Member {
            id: "w".into(),
            started_at: Timestamp(1),
            heartbeat_at: Timestamp(2),
            expires_at: Timestamp(3),
            in_flight: 4,
            max_in_flight: 8,
        };
        let mut expected = serde_json::to_value(&m).expect("member");
        expected["shards"] = 7.into();
        assert_eq!(serde_json::to_value(member(m, 7)).expect("wire member"), expected);
        for o in [LiveOutcome::Stored, LiveOutcome::Duplicate, LiveOutcome::Stale] {
            same_json(&o, &report_result(o));
        }
    }
}
