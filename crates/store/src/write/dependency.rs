//! The cycle check of `spec.dependsOn` at apply: a SyncSet whose dependencies lead back
//! to it is refused, the cycle named, and nothing of the apply is written. Its tenant
//! is locked by then, so no concurrent apply closes a cycle beside it; a SyncSet
//! written earlier in the same apply is read as written.

use super::WriteTx;
use crate::stored::decode;
use crate::StoreError;
use fleetsync_model::dependency::{cycle_through, Dependency};
use fleetsync_model::{Kind, SyncSet};
use serde::Deserialize;
use std::collections::BTreeMap;

/// What the check reads of a stored SyncSet (not its resources).
#[derive(Deserialize)]
struct Stored {
    spec: StoredSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredSpec {
    #[serde(default)]
    depends_on: Vec<Dependency>,
}

/// Refuses `s` ([`StoreError::DependencyCycle`]) if what it depends on, followed
/// through the SyncSets stored in its tenant, leads back to it.
pub(super) async fn refuse_cycle<T: WriteTx>(tx: &mut T, s: &SyncSet) -> Result<(), T::Error> {
    let (tenant, name) = (s.metadata.tenant(), s.metadata.name.as_str());
    let names = |deps: &[Dependency]| deps.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
    let mut graph = BTreeMap::from([(name.to_string(), names(&s.spec.depends_on))]);
    let mut todo = names(&s.spec.depends_on);
    while let Some(next) = todo.pop() {
        if graph.contains_key(&next) {
            continue;
        }
        let deps = match tx.object_stored(Kind::SyncSet, tenant, &next).await? {
            Some(stored) => names(&decode::<Stored>("syncsets", &stored.doc)?.spec.depends_on),
            None => Vec::new(),
        };
        todo.extend(deps.iter().cloned());
        graph.insert(next, deps);
    }
    match cycle_through(name, &graph) {
        Some(cycle) => Err(StoreError::DependencyCycle { tenant: tenant.into(), name: name.into(), cycle }.into()),
        None => Ok(()),
    }
}
