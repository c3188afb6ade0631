//! Progressive rollouts: how a SyncSet stages a new revision across its clusters
//! (`spec.rollout`), and the rollout's state as status shows it.
//!
//! A rollout moves the clusters of a SyncSet from its *stable* revision (the last one
//! that completed) to a new one, step by step. Each step reaches more clusters: every
//! cluster its selector matches, or enough clusters (in name order) to make `count` or
//! `percent` of them updated. A step passes when each cluster it reached applied the
//! new revision and is healthy, for `minSuccessTime`; more than `maxFailures` failed
//! clusters, or a step not passed within `progressDeadline`, fail the rollout, which
//! then pauses or (by default) rolls back.

use crate::error::FieldError;
use crate::selector::LabelSelector;
use crate::time::Timestamp;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::time::Duration;

/// The most steps a rollout may have.
pub const MAX_STEPS: usize = 20;
/// The longest `minSuccessTime` or `progressDeadline`.
pub const MAX_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);
/// `progressDeadline` when none is given.
pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(600);

/// `spec.rollout` of a SyncSet.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutSpec {
    /// In order; the last one must be `percent: 100`.
    pub steps: Vec<RolloutStep>,
    /// Failed clusters a step tolerates: a count (`2`) or a share of the clusters it
    /// reached (`"10%"`). Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<FailureBudget>,
    /// How long a step stays healthy before the next starts. Default 0s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_success_time: Option<Wait>,
    /// How long a step may take to pass. Default 10m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline: Option<Wait>,
    #[serde(default)]
    pub on_failure: OnFailure,
}

/// One step: exactly one of `selector`, `count` and `percent`, and optionally its own
/// gate settings.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutStep {
    /// Every cluster whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Updated clusters after this step (at least).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Updated clusters after this step, as a percentage of the SyncSet's clusters (rounded up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<FailureBudget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_success_time: Option<Wait>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline: Option<Wait>,
    /// Once passed, wait for `fleetsync rollout promote` before the next step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manual_promote: bool,
}

/// What a failed step does.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum OnFailure {
    /// Re-apply the stable revision to every cluster the new one reached.
    #[default]
    Rollback,
    /// Stop where it is (phase `Failed`) until resumed, aborted or superseded.
    Pause,
}

/// A count of clusters, or a percentage of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureBudget {
    Count(u32),
    Percent(u32),
}

impl FailureBudget {
    /// The failures allowed among `of` clusters (a percentage rounds down).
    pub fn allowed(self, of: u64) -> u64 {
        match self {
            FailureBudget::Count(n) => u64::from(n),
            FailureBudget::Percent(p) => of * u64::from(p) / 100,
        }
    }
}

impl Serialize for FailureBudget {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            FailureBudget::Count(n) => s.serialize_u32(*n),
            FailureBudget::Percent(p) => s.serialize_str(&format!("{p}%")),
        }
    }
}

impl<'de> Deserialize<'de> for FailureBudget {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Count(u32),
            Text(String),
        }
        let bad = || serde::de::Error::custom("expected a count (2) or a percentage (\"10%\")");
        match Raw::deserialize(d)? {
            Raw::Count(n) => Ok(FailureBudget::Count(n)),
            Raw::Text(s) => match s.strip_suffix('%') {
                Some(p) => p.trim().parse().map(FailureBudget::Percent).map_err(|_| bad()),
                None => s.trim().parse().map(FailureBudget::Count).map_err(|_| bad()),
            },
        }
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for FailureBudget {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "FailureBudget".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]})
    }
}

/// A duration written as `30s`, `5m` or `1h30m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait(pub Duration);

impl Serialize for Wait {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

impl<'de> Deserialize<'de> for Wait {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s)
            .map(Wait)
            .map_err(|e| serde::de::Error::custom(format!("a duration such as 30s or 5m: {e}")))
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for Wait {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string"})
    }
}

impl RolloutSpec {
    /// The gate settings of step `i`: its own, else the rollout's, else the defaults.
    pub fn gate(&self, i: usize) -> Gate {
        let step = self.steps.get(i);
        let pick = |own: Option<Wait>, all: Option<Wait>| own.or(all).map(|w| w.0);
        Gate {
            max_failures: step.and_then(|s| s.max_failures).or(self.max_failures).unwrap_or(FailureBudget::Count(0)),
            min_success_time: pick(step.and_then(|s| s.min_success_time), self.min_success_time).unwrap_or_default(),
            progress_deadline: pick(step.and_then(|s| s.progress_deadline), self.progress_deadline)
                .unwrap_or(DEFAULT_PROGRESS_DEADLINE),
            manual_promote: step.is_some_and(|s| s.manual_promote),
        }
    }

    /// Checks the rollout; the error names the field (`spec.rollout.steps[1].percent`).
    pub fn validate(&self) -> Result<(), FieldError> {
        let at = |f: String| format!("spec.rollout.{f}");
        if self.steps.is_empty() || self.steps.len() > MAX_STEPS {
            return Err(FieldError::new(
                at("steps".into()),
                format!("between 1 and {MAX_STEPS} steps are required; got {}", self.steps.len()),
            ));
        }
        check_budget(self.max_failures).map_err(|e| e.at(at("maxFailures".into())))?;
        check_wait(self.min_success_time, true).map_err(|e| e.at(at("minSuccessTime".into())))?;
        check_wait(self.progress_deadline, false).map_err(|e| e.at(at("progressDeadline".into())))?;
        for (i, s) in self.steps.iter().enumerate() {
            let f = |name: &str| at(format!("steps[{i}].{name}"));
            let chosen = [s.selector.is_some(), s.count.is_some(), s.percent.is_some()].iter().filter(|b| **b).count();
            if chosen != 1 {
                return Err(FieldError::new(
                    at(format!("steps[{i}]")),
                    "set exactly one of selector, count and percent",
                ));
            }
            if let Some(sel) = &s.selector {
                sel.validate().map_err(|e| e.under(&f("selector")))?;
            }
            if s.count == Some(0) {
                return Err(FieldError::new(f("count"), "must be at least 1"));
            }
            if let Some(p) = s.percent {
                if !(1..=100).contains(&p) {
                    return Err(FieldError::new(f("percent"), format!("must be between 1 and 100; got {p}")));
                }
            }
            check_budget(s.max_failures).map_err(|e| e.at(f("maxFailures")))?;
            check_wait(s.min_success_time, true).map_err(|e| e.at(f("minSuccessTime")))?;
            check_wait(s.progress_deadline, false).map_err(|e| e.at(f("progressDeadline")))?;
        }
        let last = self.steps.len() - 1;
        if self.steps[last].percent != Some(100) {
            return Err(FieldError::new(
                at(format!("steps[{last}]")),
                "the last step must be percent: 100, so a completed rollout reaches every cluster",
            ));
        }
        Ok(())
    }
}

fn check_budget(b: Option<FailureBudget>) -> Result<(), FieldError> {
    match b {
        Some(FailureBudget::Percent(p)) if p > 100 => {
            Err(FieldError::message(format!("a percentage between 0% and 100%; got {p}%")))
        }
        _ => Ok(()),
    }
}

fn check_wait(w: Option<Wait>, zero_ok: bool) -> Result<(), FieldError> {
    match w {
        Some(Wait(d)) if d > MAX_WAIT => Err(FieldError::message("at most 168h (7 days), the limit")),
        Some(Wait(d)) if d.is_zero() && !zero_ok => Err(FieldError::message("must be longer than 0s")),
        _ => Ok(()),
    }
}

/// The gate of one step, with defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    pub max_failures: FailureBudget,
    pub min_success_time: Duration,
    pub progress_deadline: Duration,
    pub manual_promote: bool,
}

/// Where a rollout stands.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RolloutPhase {
    /// Steps are being run.
    Progressing,
    /// Stopped by `fleetsync rollout pause`; `resume` goes on.
    Paused,
    /// Every step passed: the revision is the stable one.
    Completed,
    /// A gate failed (or the rollout was aborted) and the stable revision was re-applied
    /// to every cluster the new one reached.
    RolledBack,
    /// A gate failed with `onFailure: Pause`: stopped where it is until resumed (the
    /// gate is judged again), aborted, or superseded by a newer generation.
    Failed,
}

impl RolloutPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutPhase::Progressing => "Progressing",
            RolloutPhase::Paused => "Paused",
            RolloutPhase::Completed => "Completed",
            RolloutPhase::RolledBack => "RolledBack",
            RolloutPhase::Failed => "Failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Progressing, Self::Paused, Self::Completed, Self::RolledBack, Self::Failed]
            .into_iter()
            .find(|p| p.as_str() == s)
    }

    /// Whether clusters may be at two revisions: the rollout has not completed, so new
    /// and unreached clusters get the stable revision.
    pub fn holds_back(self) -> bool {
        self != RolloutPhase::Completed
    }
}

impl fmt::Display for RolloutPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an operator asks of a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutControl {
    /// Stop starting steps (phase `Paused`).
    Pause,
    /// Go on after `pause`, or judge a failed gate again (phase `Failed`).
    Resume,
    /// Pass the current step's wait (`manualPromote` or `minSuccessTime`) once it is healthy.
    Promote,
    /// Roll back to the stable revision now (phase `RolledBack`).
    Abort,
}

impl RolloutControl {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pause" => Some(Self::Pause),
            "resume" => Some(Self::Resume),
            "promote" => Some(Self::Promote),
            "abort" => Some(Self::Abort),
            _ => None,
        }
    }
}

/// How many of the clusters a step reached are where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepCounts {
    /// Clusters this step adds (reached by it and by no earlier step).
    pub clusters: u64,
    /// Told to run the new revision.
    pub updated: u64,
    /// Applied it and healthy.
    pub healthy: u64,
    /// Parked, or still failing when the step's `progressDeadline` passed: what
    /// `maxFailures` counts. A key that failed and is being retried is pending until then.
    pub failed: u64,
    /// Reached and neither healthy nor failed yet (0 once the rollout rolled back).
    pub pending: u64,
    /// Once the rollout rolled back: reached clusters told to run the stable revision again.
    #[serde(default)]
    pub rolled_back: u64,
}

/// A SyncSet's rollout as status shows it (`fleetsync rollout status NAME -o json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    pub tenant: String,
    pub syncset: String,
    pub phase: RolloutPhase,
    /// 0-based index of the current step.
    pub step: usize,
    /// The generation being rolled out.
    pub revision: i64,
    /// The last generation that completed: where unreached clusters stay, and what a
    /// rollback re-applies (0: none).
    pub stable: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the current step of a progressing rollout waits for: `waiting for promote`,
    /// `waiting for minSuccessTime until T`, `waiting for N clusters to apply`, `waiting
    /// for N clusters to become ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    pub step_started_at: Timestamp,
    /// Since when the current step has been healthy, if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_since: Option<Timestamp>,
    /// Per step; filled in when read for status.
    #[serde(default)]
    pub steps: Vec<StepCounts>,
    pub updated_at: Timestamp,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> RolloutSpec {
        serde_saphyr::from_str(yaml).expect("parses")
    }

    #[test]
    fn the_interface_of_the_issue_parses_with_its_defaults() {
        let s = spec(
            "steps:\n  - selector: {matchLabels: {ring: canary}}\n  - percent: 50\n  - percent: 100\nmaxFailures: 0\nminSuccessTime: 0s\nprogressDeadline: 5m\nonFailure: Rollback\n",
        );
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.steps.len(), 3);
        let g = s.gate(1);
        assert_eq!(
            (g.max_failures, g.min_success_time, g.progress_deadline),
            (FailureBudget::Count(0), Duration::ZERO, Duration::from_secs(300))
        );
        let bare = spec("steps: [{percent: 100}]");
        assert_eq!((bare.on_failure, bare.gate(0).progress_deadline), (OnFailure::Rollback, DEFAULT_PROGRESS_DEADLINE));
    }

    #[test]
    fn a_step_overrides_the_rollouts_gate() {
        let s = spec("steps: [{count: 1, maxFailures: 10%, minSuccessTime: 1m, manualPromote: true}, {percent: 100}]\nmaxFailures: 3\nminSuccessTime: 5s");
        assert_eq!(s.gate(0).max_failures, FailureBudget::Percent(10));
        assert_eq!(s.gate(0).min_success_time, Duration::from_secs(60));
        assert!(s.gate(0).manual_promote && !s.gate(1).manual_promote);
        assert_eq!(
            (s.gate(1).max_failures, s.gate(1).min_success_time),
            (FailureBudget::Count(3), Duration::from_secs(5))
        );
        assert_eq!(FailureBudget::Percent(10).allowed(25), 2, "rounds down");
    }

    #[test]
    fn bad_rollouts_are_refused_naming_the_field() {
        let field = |yaml: &str| spec(yaml).validate().expect_err("refused").field;
        assert_eq!(field("steps: []"), "spec.rollout.steps");
        assert_eq!(field("steps: [{percent: 50, count: 2}, {percent: 100}]"), "spec.rollout.steps[0]");
        assert_eq!(field("steps: [{percent: 0}, {percent: 100}]"), "spec.rollout.steps[0].percent");
        assert_eq!(field("steps: [{count: 0}, {percent: 100}]"), "spec.rollout.steps[0].count");
        assert_eq!(field("steps: [{percent: 50}]"), "spec.rollout.steps[0]", "the last step must reach every cluster");
        assert_eq!(field("steps: [{percent: 100}]\nmaxFailures: 120%"), "spec.rollout.maxFailures");
        assert_eq!(field("steps: [{percent: 100}]\nprogressDeadline: 0s"), "spec.rollout.progressDeadline");
        assert_eq!(field("steps: [{percent: 100, minSuccessTime: 30d}]"), "spec.rollout.steps[0].minSuccessTime");
        assert_eq!(
            field("steps: [{selector: {matchLabels: {\"bad key!\": x}}}, {percent: 100}]"),
            "spec.rollout.steps[0].selector.matchLabels.bad key!"
        );
        assert!(serde_saphyr::from_str::<RolloutSpec>("steps: [{percent: 100}]\nonFailure: Explode").is_err());
        assert!(serde_saphyr::from_str::<RolloutSpec>("steps: [{percent: 100}]\nmaxFailures: lots").is_err());
    }

    #[test]
    fn budgets_and_waits_read_back_as_written() {
        let s = spec("steps: [{percent: 100}]\nmaxFailures: \"25%\"\nminSuccessTime: 1m 30s");
        let v = serde_json::to_value(&s).expect("json");
        assert_eq!((v["maxFailures"].as_str(), v["minSuccessTime"].as_str()), (Some("25%"), Some("1m 30s")));
        assert_eq!(serde_json::from_value::<RolloutSpec>(v).expect("back"), s);
    }
}
