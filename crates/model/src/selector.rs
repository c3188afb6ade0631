//! Which clusters a SyncSet targets.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A label selector; `matchLabels` must all be present with equal values. An empty
/// selector matches every cluster of the tenant.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

impl LabelSelector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_labels_must_all_match() {
        let sel = LabelSelector { match_labels: [("env".into(), "prod".into())].into() };
        let prod: BTreeMap<_, _> = [("env".to_string(), "prod".to_string()), ("x".into(), "y".into())].into();
        let dev: BTreeMap<_, _> = [("env".to_string(), "dev".to_string())].into();
        assert!(sel.matches(&prod));
        assert!(!sel.matches(&dev));
        assert!(!sel.matches(&BTreeMap::new()));
        assert!(LabelSelector::default().matches(&dev));
    }
}
