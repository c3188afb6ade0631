//! Which clusters a SyncSet (or a rollout step) targets: Kubernetes' label selector,
//! `matchLabels` and `matchExpressions`, matched as [`LabelTerm`]s (the terms of the
//! string syntax, one rule for both).

use crate::error::FieldError;
use crate::label_query::LabelTerm;
use crate::names::check_label;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A label selector: every `matchLabels` pair present with its value, and every
/// `matchExpressions` requirement met. An empty selector matches every cluster of the
/// tenant.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements on a label, as Kubernetes writes them:
    /// `{key: env, operator: In, values: [prod, stage]}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelRequirement>,
}

/// One requirement of [`LabelSelector::match_expressions`].
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelRequirement {
    pub key: String,
    pub operator: LabelOperator,
    /// For `In` and `NotIn`: at least one value. For `Exists` and `DoesNotExist`: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl LabelRequirement {
    /// The requirement as a term of the string syntax, which decides what it matches.
    pub fn term(&self) -> LabelTerm {
        let (key, values) = (self.key.clone(), self.values.iter().cloned().collect());
        match self.operator {
            LabelOperator::In => LabelTerm::In(key, values),
            LabelOperator::NotIn => LabelTerm::NotIn(key, values),
            LabelOperator::Exists => LabelTerm::Exists(key),
            LabelOperator::DoesNotExist => LabelTerm::DoesNotExist(key),
        }
    }
}

/// `In` (the label has one of the values), `NotIn` (it has none of them, or no such
/// label), `Exists`, `DoesNotExist`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LabelOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// The most requirements a selector may hold, and values a requirement.
const MAX_EXPRESSIONS: usize = 32;
const MAX_VALUES: usize = 256;

impl LabelSelector {
    /// Selects clusters whose labels hold all of `labels`.
    pub fn labels(labels: BTreeMap<String, String>) -> Self {
        LabelSelector { match_labels: labels, match_expressions: Vec::new() }
    }

    /// The selector as terms that must all hold.
    pub fn terms(&self) -> Vec<LabelTerm> {
        let labels = self.match_labels.iter().map(|(k, v)| LabelTerm::Equal(k.clone(), v.clone()));
        labels.chain(self.match_expressions.iter().map(LabelRequirement::term)).collect()
    }

    /// Whether `labels` meet every term (`matchLabels` compared in place: most
    /// selectors have nothing else, and planning asks this of every cluster).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.term().matches(labels))
    }

    /// Checks the keys and values and each requirement's operator and values; the
    /// first broken rule, with its field under the selector.
    pub fn validate(&self) -> Result<(), FieldError> {
        for (k, v) in &self.match_labels {
            check_label(k, v).map_err(|r| FieldError::new(format!("matchLabels.{k}"), r.to_string()))?;
        }
        if self.match_expressions.len() > MAX_EXPRESSIONS {
            let rule = format!("more than {MAX_EXPRESSIONS} requirements (the limit)");
            return Err(FieldError::new("matchExpressions", rule));
        }
        for (i, r) in self.match_expressions.iter().enumerate() {
            let at = |field: &str| format!("matchExpressions[{i}]{field}");
            check_label(&r.key, "").map_err(|e| FieldError::new(at(".key"), e.to_string()))?;
            match (r.operator, r.values.len()) {
                (LabelOperator::In | LabelOperator::NotIn, 0) => {
                    return Err(FieldError::new(at(".values"), "In and NotIn need at least one value"));
                }
                (LabelOperator::Exists | LabelOperator::DoesNotExist, n) if n > 0 => {
                    return Err(FieldError::new(at(".values"), "Exists and DoesNotExist take no values"));
                }
                (_, n) if n > MAX_VALUES => {
                    return Err(FieldError::new(at(".values"), format!("more than {MAX_VALUES} values (the limit)")));
                }
                _ => {}
            }
            for (j, v) in r.values.iter().enumerate() {
                check_label(&r.key, v).map_err(|e| FieldError::new(at(&format!(".values[{j}]")), e.to_string()))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn selector(yaml: &str) -> Result<LabelSelector, String> {
        let s: LabelSelector = serde_saphyr::from_str(yaml).map_err(|e| e.to_string())?;
        s.validate().map_err(|e| e.to_string())?;
        Ok(s)
    }

    #[test]
    fn match_labels_must_all_match() {
        let sel = LabelSelector::labels(labels(&[("env", "prod")]));
        assert!(sel.matches(&labels(&[("env", "prod"), ("x", "y")])));
        assert!(!sel.matches(&labels(&[("env", "dev")])));
        assert!(!sel.matches(&BTreeMap::new()));
        assert!(LabelSelector::default().matches(&labels(&[("env", "dev")])));
    }

    #[test]
    fn expressions_mean_what_they_mean_in_kubernetes() {
        let sel = selector(
            "matchLabels: {tier: web}\nmatchExpressions:\n- {key: env, operator: In, values: [prod, stage]}\n\
             - {key: region, operator: NotIn, values: [eu-1]}\n- {key: managed, operator: Exists}\n\
             - {key: canary, operator: DoesNotExist}\n",
        )
        .expect("valid");
        let base = [("tier", "web"), ("env", "prod"), ("managed", "")];
        assert!(sel.matches(&labels(&base)), "NotIn also matches a cluster without the label");
        assert!(sel.matches(&labels(&[base[0], ("env", "stage"), base[2], ("region", "us-1")])));
        for (broken, why) in [
            (vec![base[0], ("env", "dev"), base[2]], "env not in the set"),
            (vec![base[0], base[1], base[2], ("region", "eu-1")], "region in the excluded set"),
            (vec![base[0], base[1]], "managed missing"),
            (vec![base[0], base[1], base[2], ("canary", "true")], "canary present"),
            (vec![("tier", "api"), base[1], base[2]], "matchLabels still hold"),
        ] {
            assert!(!sel.matches(&labels(&broken)), "{why}");
        }
        assert_eq!(sel.terms().len(), 5);
    }

    #[test]
    fn each_broken_rule_names_its_field() {
        for (yaml, want) in [
            ("matchExpressions: [{key: env, operator: Like, values: [a]}]", "unknown variant `Like`"),
            ("matchExpressions: [{key: env, operator: In}]", "matchExpressions[0].values: In and NotIn need"),
            ("matchExpressions: [{key: env, operator: Exists, values: [a]}]", "matchExpressions[0].values: Exists and"),
            ("matchExpressions: [{key: -env, operator: Exists}]", "matchExpressions[0].key: "),
            ("matchExpressions: [{key: env, operator: In, values: ['a b']}]", "matchExpressions[0].values[0]: "),
            ("matchLabels: {'-x': y}", "matchLabels.-x: "),
        ] {
            let err = selector(yaml).expect_err(yaml);
            assert!(err.contains(want), "{yaml}: {err}");
        }
        let many = format!("matchExpressions: [{}]", vec!["{key: a, operator: Exists}"; 33].join(", "));
        assert!(selector(&many).expect_err("too many").contains("more than 32 requirements"));
    }
}
