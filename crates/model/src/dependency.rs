//! Order between SyncSets: `spec.dependsOn` names SyncSets of the same namespace whose
//! key on a cluster must be Applied (and ready, where readiness is known) at its
//! current revision before this SyncSet's key on that cluster runs. What a key waits
//! for is judged by the runtime; here are the field's rules and the cycle check the
//! store runs at apply.

use crate::error::FieldError;
use crate::names::check_dns1123_label;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The most SyncSets one SyncSet may depend on.
pub const MAX_DEPENDENCIES: usize = 32;

/// A SyncSet this one waits for, on each cluster both select.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Dependency {
    /// The SyncSet, in this SyncSet's namespace.
    pub name: String,
}

/// `spec.dependsOn` of the SyncSet `name`: at most [`MAX_DEPENDENCIES`] names, each a
/// DNS-1123 label, none twice, not the SyncSet itself.
pub fn validate(name: &str, depends_on: &[Dependency]) -> Result<(), FieldError> {
    if depends_on.len() > MAX_DEPENDENCIES {
        return Err(FieldError::new(
            "spec.dependsOn",
            format!("{} entries: at most {MAX_DEPENDENCIES} are allowed", depends_on.len()),
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, d) in depends_on.iter().enumerate() {
        let field = || format!("spec.dependsOn[{i}].name");
        check_dns1123_label(&d.name).map_err(|r| FieldError::new(field(), r.to_string()))?;
        if d.name == name {
            return Err(FieldError::new(field(), "a SyncSet cannot depend on itself"));
        }
        if !seen.insert(d.name.as_str()) {
            return Err(FieldError::new(field(), format!("{} is named twice", d.name)));
        }
    }
    Ok(())
}

/// A cycle through `start` in the graph of SyncSets (name → what it depends on), as
/// the names along it from `start` back to `start` (`[a, b, a]`); `None` if there is
/// none. Names the graph lacks depend on nothing.
pub fn cycle_through(start: &str, graph: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    // Depth-first, each name entered once: the path from `start` to the name on top.
    let mut path: Vec<(&str, usize)> = vec![(start, 0)];
    let mut done = BTreeSet::new();
    while let Some((node, next)) = path.last_mut() {
        let deps = graph.get(*node).map(Vec::as_slice).unwrap_or_default();
        let Some(dep) = deps.get(*next) else {
            done.insert(*node);
            path.pop();
            continue;
        };
        *next += 1;
        if dep == start {
            let mut cycle: Vec<String> = path.iter().map(|(n, _)| n.to_string()).collect();
            cycle.push(start.to_string());
            return Some(cycle);
        }
        if !done.contains(dep.as_str()) && !path.iter().any(|(n, _)| n == dep) {
            path.push((dep.as_str(), 0));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        edges.iter().map(|(n, deps)| (n.to_string(), deps.iter().map(|d| d.to_string()).collect())).collect()
    }

    fn dep(name: &str) -> Dependency {
        Dependency { name: name.into() }
    }

    #[test]
    fn a_cycle_is_named_from_the_syncset_written() {
        let g = graph(&[("app", &["db", "cache"]), ("cache", &["net"]), ("db", &["net", "app"]), ("net", &[])]);
        assert_eq!(cycle_through("app", &g), Some(vec!["app".into(), "db".into(), "app".into()]));
        let long = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["d"]), ("d", &["b", "a"])]);
        assert_eq!(cycle_through("a", &long).expect("cycle").join(" → "), "a → b → c → d → a");
    }

    #[test]
    fn shared_dependencies_and_cycles_elsewhere_are_not_a_cycle_through_start() {
        let diamond = graph(&[("app", &["db", "cache"]), ("db", &["net"]), ("cache", &["net"]), ("net", &[])]);
        assert_eq!(cycle_through("app", &diamond), None);
        // b and c loop, but not through a: the write of b or c is the one refused.
        let aside = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["b"])]);
        assert_eq!(cycle_through("a", &aside), None);
        assert!(cycle_through("b", &aside).is_some());
        assert_eq!(cycle_through("a", &graph(&[("a", &["missing"])])), None, "an unknown name ends a path");
    }

    #[test]
    fn the_field_is_bounded_and_names_each_bad_entry() {
        assert!(validate("app", &[dep("db"), dep("cache")]).is_ok());
        let e = validate("app", &[dep("db"), dep("app")]).expect_err("itself");
        assert_eq!(
            (e.field.as_str(), e.message.as_str()),
            ("spec.dependsOn[1].name", "a SyncSet cannot depend on itself")
        );
        assert_eq!(validate("app", &[dep("db"), dep("db")]).expect_err("twice").field, "spec.dependsOn[1].name");
        assert_eq!(validate("app", &[dep("Not_A_Label")]).expect_err("label").field, "spec.dependsOn[0].name");
        let many: Vec<Dependency> = (0..=MAX_DEPENDENCIES).map(|i| dep(&format!("s{i}"))).collect();
        let e = validate("app", &many).expect_err("too many");
        assert!(e.message.contains("at most 32"), "{e}");
    }
}
