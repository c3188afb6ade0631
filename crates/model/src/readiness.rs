//! Readiness: whether a live object, as an agent reports it (the whole object
//! including `status`), has finished rolling out, judged the way
//! `kubectl rollout status` and Argo CD's built-in health checks judge it.
//!
//! Built-in rules cover `apps` Deployments (a Deployment past its progress deadline is
//! not ready), StatefulSets (with a partition, only the replicas above it must be
//! updated) and DaemonSets, `batch` Jobs (a suspended Job is not ready) and
//! CustomResourceDefinitions (`Established`), any version. Every other object follows
//! the kstatus conventions custom resources use: not ready while its
//! `status.observedGeneration` (if it has one) is behind, while a `Stalled` or
//! `Reconciling` condition is `True`, or while its `Ready` condition is not `True`;
//! ready otherwise, and so is anything without `apiVersion` or `kind`. The reasons given for "not ready" are short sentences made only
//! of kinds, counts and (for a failed Job) its condition's reason, truncated, so that
//! they can be shown and stored without echoing arbitrary object data.

use serde_json::Value;

/// The most characters of a failed Job's condition reason or message echoed in a reason.
pub const MAX_ECHOED_CHARS: usize = 200;

/// Whether a live object is ready; `Err(reason)` names what is missing in a short human sentence
/// ("Deployment: 1 of 3 replicas updated", "Job: not yet succeeded (0 of 1 completions)",
/// "Deployment: observedGeneration 3 < generation 4").
///
/// Objects of kinds without a built-in rule, or without `apiVersion`/`kind`, are ready.
pub fn readiness(object: &Value) -> Result<(), String> {
    let (Some(api_version), Some(kind)) =
        (object.get("apiVersion").and_then(Value::as_str), object.get("kind").and_then(Value::as_str))
    else {
        return Ok(());
    };
    // "apps/v1" -> "apps"; a core "v1" has no group.
    let group = api_version.split_once('/').map_or("", |(group, _)| group);
    match (group, kind) {
        ("apps", "Deployment") => deployment(object),
        ("apps", "StatefulSet") => stateful_set(object),
        ("apps", "DaemonSet") => daemon_set(object),
        ("batch", "Job") => job(object),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(object),
        // A Pod that ran to completion is done, though its Ready condition is False.
        ("", "Pod") if object.pointer("/status/phase").and_then(Value::as_str) == Some("Succeeded") => Ok(()),
        _ => conventions(kind, object),
    }
}

/// Whether objects of this kind have anything to be ready for: no rule applies to
/// core ConfigMaps and Secrets, nor to RBAC objects, which carry data or grants and no
/// status. Health read-back skips them (a Secret is never read back).
pub fn has_readiness(api_version: &str, kind: &str) -> bool {
    let group = api_version.split_once('/').map_or("", |(group, _)| group);
    !matches!((group, kind), ("", "ConfigMap" | "Secret") | ("rbac.authorization.k8s.io", _))
}

/// An integer at a JSON pointer, if it is there and is one.
fn int(object: &Value, pointer: &str) -> Option<i64> {
    object.pointer(pointer).and_then(Value::as_i64)
}

/// A status count: missing (or not an integer) counts as 0.
fn count(object: &Value, pointer: &str) -> i64 {
    int(object, pointer).unwrap_or(0)
}

/// The desired count at `spec.<field>`, 1 when absent.
fn desired(object: &Value, pointer: &str) -> i64 {
    int(object, pointer).unwrap_or(1)
}

/// The controller has seen the latest spec: `status.observedGeneration >= metadata.generation`
/// whenever `metadata.generation` is present.
fn observed(kind: &str, object: &Value) -> Result<(), String> {
    let Some(generation) = int(object, "/metadata/generation") else {
        return Ok(());
    };
    let observed = count(object, "/status/observedGeneration");
    if observed < generation {
        return Err(format!("{kind}: observedGeneration {observed} < generation {generation}"));
    }
    Ok(())
}

fn plural(n: i64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

fn deployment(object: &Value) -> Result<(), String> {
    const KIND: &str = "Deployment";
    observed(KIND, object)?;
    if condition(object, "Progressing").is_some_and(|c| reason_of(c) == Some("ProgressDeadlineExceeded")) {
        return Err(format!("{KIND}: progress deadline exceeded"));
    }
    let wanted = desired(object, "/spec/replicas");
    let replicas = count(object, "/status/replicas");
    let updated = count(object, "/status/updatedReplicas");
    let available = count(object, "/status/availableReplicas");
    if updated < wanted {
        return Err(format!("{KIND}: {updated} of {wanted} replicas updated"));
    }
    if replicas > updated {
        let old = replicas - updated;
        return Err(format!("{KIND}: {} pending termination", plural(old, "old replica", "old replicas")));
    }
    if replicas < updated {
        return Err(format!("{KIND}: {} reported, {updated} updated", plural(replicas, "replica", "replicas")));
    }
    if available < wanted {
        return Err(format!("{KIND}: {available} of {wanted} replicas available"));
    }
    Ok(())
}

fn stateful_set(object: &Value) -> Result<(), String> {
    const KIND: &str = "StatefulSet";
    observed(KIND, object)?;
    let wanted = desired(object, "/spec/replicas");
    let ready = count(object, "/status/readyReplicas");
    if ready < wanted {
        return Err(format!("{KIND}: {ready} of {wanted} replicas ready"));
    }
    let strategy = object.pointer("/spec/updateStrategy/type").and_then(Value::as_str).unwrap_or("RollingUpdate");
    if strategy == "OnDelete" {
        // Pods are replaced only when deleted by hand: there is no rollout to wait for.
        return Ok(());
    }
    let partition = count(object, "/spec/updateStrategy/rollingUpdate/partition");
    if partition > 0 {
        // Only the replicas with an ordinal at or above the partition are updated: the
        // revisions differ by design until it is lowered.
        let (updated, due) = (count(object, "/status/updatedReplicas"), (wanted - partition).max(0));
        if updated < due {
            return Err(format!("{KIND}: {updated} of {due} replicas above partition {partition} updated"));
        }
        return Ok(());
    }
    let revision = |field: &str| object.pointer(&format!("/status/{field}")).and_then(Value::as_str);
    match (revision("currentRevision"), revision("updateRevision")) {
        (Some(current), Some(update)) => {
            if current != update {
                return Err(format!("{KIND}: current revision is not yet the update revision"));
            }
        }
        _ => {
            let updated = count(object, "/status/updatedReplicas");
            if updated < wanted {
                return Err(format!("{KIND}: {updated} of {wanted} replicas updated"));
            }
        }
    }
    Ok(())
}

fn daemon_set(object: &Value) -> Result<(), String> {
    const KIND: &str = "DaemonSet";
    observed(KIND, object)?;
    let wanted = count(object, "/status/desiredNumberScheduled");
    let updated = count(object, "/status/updatedNumberScheduled");
    let available = count(object, "/status/numberAvailable");
    if updated < wanted {
        return Err(format!("{KIND}: {updated} of {wanted} pods updated"));
    }
    if available < wanted {
        return Err(format!("{KIND}: {available} of {wanted} pods available"));
    }
    Ok(())
}

/// The first condition of `type_`.
fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    let conditions = object.pointer("/status/conditions").and_then(Value::as_array)?;
    conditions.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// The first condition of `type_`, if its status is `"True"`.
fn true_condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    condition(object, type_).filter(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

fn reason_of(condition: &Value) -> Option<&str> {
    condition.get("reason").and_then(Value::as_str)
}

/// A condition's reason (or message), echoed, after `": "`; nothing if it has neither.
fn why(condition: &Value) -> String {
    ["reason", "message"]
        .iter()
        .filter_map(|field| condition.get(*field).and_then(Value::as_str))
        .map(str::trim)
        .find(|text| !text.is_empty())
        .map(|text| format!(": {}", echo(text)))
        .unwrap_or_default()
}

fn crd(object: &Value) -> Result<(), String> {
    match true_condition(object, "Established") {
        Some(_) => Ok(()),
        None => Err("CustomResourceDefinition: not established".into()),
    }
}

/// The kstatus conventions, for kinds without a rule of their own.
fn conventions(kind: &str, object: &Value) -> Result<(), String> {
    let kind = echo(kind);
    if object.pointer("/status/observedGeneration").is_some() {
        observed(&kind, object)?;
    }
    if let Some(stalled) = true_condition(object, "Stalled") {
        return Err(format!("{kind}: stalled{}", why(stalled)));
    }
    if let Some(reconciling) = true_condition(object, "Reconciling") {
        return Err(format!("{kind}: reconciling{}", why(reconciling)));
    }
    match condition(object, "Ready") {
        Some(ready) if ready.get("status").and_then(Value::as_str) != Some("True") => {
            Err(format!("{kind}: not ready{}", why(ready)))
        }
        _ => Ok(()),
    }
}

/// At most [`MAX_ECHOED_CHARS`] characters of `text`, on one line.
fn echo(text: &str) -> String {
    let mut out: String = text.chars().take(MAX_ECHOED_CHARS).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if text.chars().nth(MAX_ECHOED_CHARS).is_some() {
        out.push('…');
    }
    out
}

fn job(object: &Value) -> Result<(), String> {
    const KIND: &str = "Job";
    // A failure is terminal: say so before anything else.
    if let Some(failed) = true_condition(object, "Failed") {
        return Err(format!("{KIND}: failed{}", why(failed)));
    }
    if true_condition(object, "Complete").is_some() {
        return Ok(());
    }
    if object.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) {
        return Err(format!("{KIND}: suspended"));
    }
    let completions = desired(object, "/spec/completions");
    let succeeded = count(object, "/status/succeeded");
    if succeeded >= completions {
        return Ok(());
    }
    Err(format!("{KIND}: not yet succeeded ({succeeded} of {completions} completions)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn not_ready(object: &Value) -> String {
        match readiness(object) {
            Ok(()) => panic!("expected not ready: {object}"),
            Err(reason) => reason,
        }
    }

    // ---- kinds without rules ----

    #[test]
    fn config_map_is_ready() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "generation": 9}, "data": {"a": "b"}});
        assert_eq!(readiness(&cm), Ok(()));
    }

    #[test]
    fn objects_without_api_version_or_kind_are_ready() {
        // A Deployment without status would not be ready; without apiVersion/kind no rule applies.
        assert_eq!(readiness(&json!({"kind": "Deployment", "spec": {"replicas": 3}})), Ok(()));
        assert_eq!(readiness(&json!({"apiVersion": "apps/v1", "spec": {"replicas": 3}})), Ok(()));
        assert_eq!(readiness(&json!(null)), Ok(()));
        assert_eq!(readiness(&json!("Deployment")), Ok(()));
        // ...and the same object with both is judged.
        assert!(readiness(&json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 3}})).is_err());
    }

    #[test]
    fn rules_match_the_group_not_just_the_kind() {
        let unready =
            |api_version: &str, kind: &str| json!({"apiVersion": api_version, "kind": kind, "spec": {"replicas": 2}});
        // Any version of the right group is judged.
        assert!(readiness(&unready("apps/v1", "Deployment")).is_err());
        assert!(readiness(&unready("apps/v1beta2", "Deployment")).is_err());
        assert!(readiness(&unready("apps/v1", "StatefulSet")).is_err());
        assert!(readiness(&unready("batch/v1", "Job")).is_err());
        // Other groups (a CRD of the same kind, the old extensions group) are not.
        assert_eq!(readiness(&unready("extensions/v1beta1", "Deployment")), Ok(()));
        assert_eq!(readiness(&unready("example.com/v1", "Deployment")), Ok(()));
        assert_eq!(readiness(&unready("v1", "Deployment")), Ok(()));
        assert_eq!(readiness(&unready("apps.example.com/v1", "Job")), Ok(()));
        assert_eq!(readiness(&unready("apps/v1", "deployment")), Ok(()));
    }

    // ---- Deployment ----

    fn deployment(spec_replicas: Option<i64>, generation: i64, status: Value) -> Value {
        let mut spec = json!({"selector": {"matchLabels": {"app": "web"}}});
        if let Some(replicas) = spec_replicas {
            spec["replicas"] = json!(replicas);
        }
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "generation": generation},
            "spec": spec,
            "status": status,
        })
    }

    fn deployment_status(observed: i64, replicas: i64, updated: i64, available: i64) -> Value {
        json!({"observedGeneration": observed, "replicas": replicas, "updatedReplicas": updated,
               "readyReplicas": available, "availableReplicas": available})
    }

    #[test]
    fn deployment_ready() {
        assert_eq!(readiness(&deployment(Some(3), 4, deployment_status(4, 3, 3, 3))), Ok(()));
        // observedGeneration ahead of generation, and more available than wanted, are fine.
        assert_eq!(readiness(&deployment(Some(3), 4, deployment_status(5, 3, 3, 4))), Ok(()));
        // spec.replicas defaults to 1.
        assert_eq!(readiness(&deployment(None, 1, deployment_status(1, 1, 1, 1))), Ok(()));
        // Scaled to zero.
        assert_eq!(readiness(&deployment(Some(0), 2, json!({"observedGeneration": 2}))), Ok(()));
    }

    #[test]
    fn deployment_without_generation_skips_the_generation_check() {
        let mut d = deployment(Some(2), 1, json!({"replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}));
        d["metadata"].as_object_mut().expect("metadata").remove("generation");
        assert_eq!(readiness(&d), Ok(()));
    }

    #[test]
    fn deployment_observed_generation_behind() {
        let d = deployment(Some(3), 4, deployment_status(3, 3, 3, 3));
        assert_eq!(not_ready(&d), "Deployment: observedGeneration 3 < generation 4");
    }

    #[test]
    fn deployment_missing_observed_generation_counts_as_zero() {
        let d = deployment(Some(1), 2, json!({"replicas": 1, "updatedReplicas": 1, "availableReplicas": 1}));
        assert_eq!(not_ready(&d), "Deployment: observedGeneration 0 < generation 2");
    }

    #[test]
    fn deployment_replicas_not_updated() {
        let d = deployment(Some(3), 4, deployment_status(4, 3, 1, 3));
        assert_eq!(not_ready(&d), "Deployment: 1 of 3 replicas updated");
    }

    #[test]
    fn deployment_default_one_replica_not_updated() {
        let d = deployment(None, 1, deployment_status(1, 1, 0, 1));
        assert_eq!(not_ready(&d), "Deployment: 0 of 1 replicas updated");
    }

    #[test]
    fn deployment_old_replicas_pending_termination() {
        let d = deployment(Some(3), 4, deployment_status(4, 5, 3, 3));
        assert_eq!(not_ready(&d), "Deployment: 2 old replicas pending termination");
        let d = deployment(Some(3), 4, deployment_status(4, 4, 3, 3));
        assert_eq!(not_ready(&d), "Deployment: 1 old replica pending termination");
    }

    #[test]
    fn deployment_status_replicas_missing_is_not_equal_to_updated() {
        let d = deployment(Some(2), 1, json!({"observedGeneration": 1, "updatedReplicas": 2, "availableReplicas": 2}));
        assert_eq!(not_ready(&d), "Deployment: 0 replicas reported, 2 updated");
    }

    #[test]
    fn deployment_replicas_not_available() {
        let d = deployment(Some(3), 4, deployment_status(4, 3, 3, 2));
        assert_eq!(not_ready(&d), "Deployment: 2 of 3 replicas available");
    }

    #[test]
    fn deployment_missing_status_is_not_ready() {
        let mut d = deployment(Some(3), 1, json!({}));
        d.as_object_mut().expect("object").remove("status");
        assert_eq!(not_ready(&d), "Deployment: observedGeneration 0 < generation 1");
        // Without a generation either, the missing counts are what is reported.
        d["metadata"].as_object_mut().expect("metadata").remove("generation");
        assert_eq!(not_ready(&d), "Deployment: 0 of 3 replicas updated");
        // Even with the default single replica.
        d["spec"].as_object_mut().expect("spec").remove("replicas");
        assert_eq!(not_ready(&d), "Deployment: 0 of 1 replicas updated");
    }

    #[test]
    fn deployment_non_integer_counts_count_as_zero() {
        let d = deployment(
            Some(1),
            1,
            json!({"observedGeneration": 1, "replicas": "1", "updatedReplicas": 1.0, "availableReplicas": 1}),
        );
        assert_eq!(not_ready(&d), "Deployment: 0 of 1 replicas updated");
    }

    // ---- StatefulSet ----

    fn stateful_set(spec: Value, generation: i64, status: Value) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "default", "generation": generation},
            "spec": spec,
            "status": status,
        })
    }

    #[test]
    fn stateful_set_ready_with_revisions() {
        let s = stateful_set(
            json!({"replicas": 3}),
            2,
            json!({"observedGeneration": 2, "replicas": 3, "readyReplicas": 3, "updatedReplicas": 3,
                   "currentRevision": "db-7c9", "updateRevision": "db-7c9"}),
        );
        assert_eq!(readiness(&s), Ok(()));
    }

    #[test]
    fn stateful_set_ready_without_revisions_by_updated_replicas() {
        let s = stateful_set(
            json!({"replicas": 3, "updateStrategy": {"type": "RollingUpdate"}}),
            2,
            json!({"observedGeneration": 2, "readyReplicas": 3, "updatedReplicas": 3}),
        );
        assert_eq!(readiness(&s), Ok(()));
        // Default of one replica.
        let s = stateful_set(json!({}), 1, json!({"observedGeneration": 1, "readyReplicas": 1, "updatedReplicas": 1}));
        assert_eq!(readiness(&s), Ok(()));
    }

    #[test]
    fn stateful_set_observed_generation_behind() {
        let s = stateful_set(
            json!({"replicas": 3}),
            5,
            json!({"observedGeneration": 4, "readyReplicas": 3, "updatedReplicas": 3,
                   "currentRevision": "a", "updateRevision": "a"}),
        );
        assert_eq!(not_ready(&s), "StatefulSet: observedGeneration 4 < generation 5");
    }

    #[test]
    fn stateful_set_replicas_not_ready() {
        let s = stateful_set(
            json!({"replicas": 3}),
            2,
            json!({"observedGeneration": 2, "readyReplicas": 2, "updatedReplicas": 3,
                   "currentRevision": "a", "updateRevision": "a"}),
        );
        assert_eq!(not_ready(&s), "StatefulSet: 2 of 3 replicas ready");
        // Missing readyReplicas counts as 0, with the default single replica.
        let s = stateful_set(json!({}), 1, json!({"observedGeneration": 1, "updatedReplicas": 1}));
        assert_eq!(not_ready(&s), "StatefulSet: 0 of 1 replicas ready");
    }

    #[test]
    fn stateful_set_revision_not_current() {
        let s = stateful_set(
            json!({"replicas": 3}),
            2,
            // All ready and even "updated", but the revisions disagree: the revisions win.
            json!({"observedGeneration": 2, "readyReplicas": 3, "updatedReplicas": 3,
                   "currentRevision": "db-old", "updateRevision": "db-new"}),
        );
        let reason = not_ready(&s);
        assert_eq!(reason, "StatefulSet: current revision is not yet the update revision");
        assert!(!reason.contains("db-old") && !reason.contains("db-new"));
    }

    #[test]
    fn stateful_set_without_both_revisions_checks_updated_replicas() {
        let s = stateful_set(
            json!({"replicas": 3}),
            2,
            json!({"observedGeneration": 2, "readyReplicas": 3, "updatedReplicas": 1,
                   "updateRevision": "db-new"}),
        );
        assert_eq!(not_ready(&s), "StatefulSet: 1 of 3 replicas updated");
    }

    #[test]
    fn stateful_set_on_delete_skips_the_update_check() {
        let status = json!({"observedGeneration": 2, "readyReplicas": 3, "updatedReplicas": 0,
                            "currentRevision": "db-old", "updateRevision": "db-new"});
        let s = stateful_set(json!({"replicas": 3, "updateStrategy": {"type": "OnDelete"}}), 2, status.clone());
        assert_eq!(readiness(&s), Ok(()));
        let s = stateful_set(json!({"replicas": 3, "updateStrategy": {"type": "RollingUpdate"}}), 2, status);
        assert!(readiness(&s).is_err());
    }

    // ---- DaemonSet ----

    fn daemon_set(generation: i64, status: Value) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "kube-system", "generation": generation},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}},
            "status": status,
        })
    }

    fn daemon_status(observed: i64, desired: i64, updated: i64, available: i64) -> Value {
        json!({"observedGeneration": observed, "desiredNumberScheduled": desired,
               "currentNumberScheduled": desired, "updatedNumberScheduled": updated,
               "numberReady": available, "numberAvailable": available})
    }

    #[test]
    fn daemon_set_ready() {
        assert_eq!(readiness(&daemon_set(3, daemon_status(3, 5, 5, 5))), Ok(()));
        // No nodes to schedule on: nothing to wait for.
        assert_eq!(readiness(&daemon_set(1, json!({"observedGeneration": 1}))), Ok(()));
    }

    #[test]
    fn daemon_set_observed_generation_behind() {
        assert_eq!(
            not_ready(&daemon_set(3, daemon_status(2, 5, 5, 5))),
            "DaemonSet: observedGeneration 2 < generation 3"
        );
    }

    #[test]
    fn daemon_set_pods_not_updated() {
        assert_eq!(not_ready(&daemon_set(3, daemon_status(3, 5, 4, 5))), "DaemonSet: 4 of 5 pods updated");
    }

    #[test]
    fn daemon_set_pods_not_available() {
        assert_eq!(not_ready(&daemon_set(3, daemon_status(3, 5, 5, 3))), "DaemonSet: 3 of 5 pods available");
        // Missing numberAvailable counts as 0.
        let d =
            daemon_set(1, json!({"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2}));
        assert_eq!(not_ready(&d), "DaemonSet: 0 of 2 pods available");
    }

    // ---- Job ----

    fn job(spec: Value, status: Value) -> Value {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "migrate", "namespace": "default", "generation": 1},
            "spec": spec,
            "status": status,
        })
    }

    #[test]
    fn job_ready_by_succeeded_count() {
        assert_eq!(readiness(&job(json!({}), json!({"succeeded": 1}))), Ok(()));
        assert_eq!(readiness(&job(json!({"completions": 3}), json!({"succeeded": 3}))), Ok(()));
    }

    #[test]
    fn job_ready_by_complete_condition() {
        let j = job(
            json!({"completions": 3}),
            json!({"succeeded": 0, "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True"},
                {"type": "Complete", "status": "True"}]}),
        );
        assert_eq!(readiness(&j), Ok(()));
    }

    #[test]
    fn job_complete_condition_must_be_true() {
        let j = job(json!({}), json!({"conditions": [{"type": "Complete", "status": "False"}]}));
        assert_eq!(not_ready(&j), "Job: not yet succeeded (0 of 1 completions)");
    }

    #[test]
    fn job_not_yet_succeeded() {
        assert_eq!(not_ready(&job(json!({}), json!({"active": 1}))), "Job: not yet succeeded (0 of 1 completions)");
        assert_eq!(
            not_ready(&job(json!({"completions": 3}), json!({"succeeded": 2, "active": 1}))),
            "Job: not yet succeeded (2 of 3 completions)"
        );
        // No status at all.
        let mut j = job(json!({}), json!({}));
        j.as_object_mut().expect("object").remove("status");
        assert!(not_ready(&j).starts_with("Job: not yet succeeded"));
    }

    #[test]
    fn job_failed_gives_the_reason() {
        let j = job(
            json!({"backoffLimit": 2}),
            json!({"failed": 3, "conditions": [{"type": "Failed", "status": "True",
                "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]}),
        );
        assert_eq!(not_ready(&j), "Job: failed: BackoffLimitExceeded");
    }

    #[test]
    fn job_failed_falls_back_to_the_message_then_nothing() {
        let j = job(json!({}), json!({"conditions": [{"type": "Failed", "status": "True", "message": "deadline"}]}));
        assert_eq!(not_ready(&j), "Job: failed: deadline");
        let j = job(
            json!({}),
            json!({"conditions": [{"type": "Failed", "status": "True", "reason": "", "message": "deadline"}]}),
        );
        assert_eq!(not_ready(&j), "Job: failed: deadline");
        let j = job(json!({}), json!({"conditions": [{"type": "Failed", "status": "True"}]}));
        assert_eq!(not_ready(&j), "Job: failed");
    }

    #[test]
    fn job_failed_wins_over_succeeded() {
        let j = job(
            json!({}),
            json!({"succeeded": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}),
        );
        assert_eq!(not_ready(&j), "Job: failed: DeadlineExceeded");
    }

    #[test]
    fn job_failed_condition_must_be_true() {
        let j = job(
            json!({}),
            json!({"succeeded": 1, "conditions": [{"type": "Failed", "status": "False", "reason": "X"}]}),
        );
        assert_eq!(readiness(&j), Ok(()));
    }

    #[test]
    fn job_failed_reason_is_truncated_and_kept_on_one_line() {
        let long = format!("{}\n{}", "é".repeat(150), "x".repeat(500));
        let j = job(json!({}), json!({"conditions": [{"type": "Failed", "status": "True", "message": long}]}));
        let reason = not_ready(&j);
        let echoed = reason.strip_prefix("Job: failed: ").expect("prefix");
        assert_eq!(echoed.chars().count(), MAX_ECHOED_CHARS + 1, "{reason}");
        assert!(echoed.ends_with('…'));
        assert!(!reason.contains('\n'));
        assert!(echoed.starts_with(&"é".repeat(150)));
        // Exactly the limit is not marked as truncated.
        let exact = "y".repeat(MAX_ECHOED_CHARS);
        let j = job(json!({}), json!({"conditions": [{"type": "Failed", "status": "True", "reason": exact.clone()}]}));
        assert_eq!(not_ready(&j), format!("Job: failed: {exact}"));
    }

    // ---- the cases kubectl's rollout status and kstatus add ----

    #[test]
    fn a_deployment_past_its_progress_deadline_is_not_ready_whatever_its_counts() {
        let mut d = deployment(Some(3), 2, deployment_status(2, 3, 1, 1));
        d["status"]["conditions"] =
            json!([{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]);
        assert_eq!(not_ready(&d), "Deployment: progress deadline exceeded");
        d["status"]["conditions"][0]["reason"] = json!("ReplicaSetUpdated");
        assert_eq!(not_ready(&d), "Deployment: 1 of 3 replicas updated", "still progressing: the counts speak");
    }

    #[test]
    fn a_partitioned_stateful_set_waits_only_for_the_replicas_above_the_partition() {
        let spec =
            json!({"replicas": 5, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 3}}});
        let status = |updated: i64| {
            json!({"observedGeneration": 2, "replicas": 5, "readyReplicas": 5, "updatedReplicas": updated,
                   "currentRevision": "db-1", "updateRevision": "db-2"})
        };
        assert_eq!(readiness(&stateful_set(spec.clone(), 2, status(2))), Ok(()), "ordinals 3 and 4 updated");
        assert_eq!(
            not_ready(&stateful_set(spec.clone(), 2, status(1))),
            "StatefulSet: 1 of 2 replicas above partition 3 updated"
        );
        let unpartitioned = json!({"replicas": 5});
        assert_eq!(
            not_ready(&stateful_set(unpartitioned, 2, status(5))),
            "StatefulSet: current revision is not yet the update revision"
        );
    }

    #[test]
    fn a_suspended_job_is_not_ready_until_it_completes() {
        assert_eq!(not_ready(&job(json!({"suspend": true}), json!({}))), "Job: suspended");
        let done = job(json!({"suspend": true}), json!({"conditions": [{"type": "Complete", "status": "True"}]}));
        assert_eq!(readiness(&done), Ok(()));
    }

    #[test]
    fn a_completed_pod_is_ready_and_data_kinds_have_no_readiness() {
        let pod = |phase: &str| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                   "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}]}})
        };
        assert_eq!(readiness(&pod("Succeeded")), Ok(()));
        assert_eq!(not_ready(&pod("Running")), "Pod: not ready: PodCompleted");
        assert!(!has_readiness("v1", "Secret") && !has_readiness("v1", "ConfigMap"));
        assert!(!has_readiness("rbac.authorization.k8s.io/v1", "ClusterRole"));
        assert!(has_readiness("apps/v1", "Deployment") && has_readiness("example.com/v1", "Secret"));
    }

    #[test]
    fn a_crd_is_ready_once_established() {
        let crd = |status: &str| {
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": "widgets.example.com", "generation": 1},
                   "status": {"conditions": [{"type": "Established", "status": status}]}})
        };
        assert_eq!(readiness(&crd("True")), Ok(()));
        assert_eq!(not_ready(&crd("False")), "CustomResourceDefinition: not established");
    }

    #[test]
    fn custom_resources_follow_the_kstatus_conventions() {
        let widget = |status: Value| {
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "generation": 4},
                   "status": status})
        };
        assert_eq!(readiness(&widget(json!({}))), Ok(()), "no conditions: nothing to wait for");
        assert_eq!(readiness(&widget(json!({"conditions": [{"type": "Ready", "status": "True"}]}))), Ok(()));
        let cond = |t: &str, st: &str| json!({"conditions": [{"type": t, "status": st, "reason": "Provisioning"}]});
        assert_eq!(not_ready(&widget(cond("Ready", "False"))), "Widget: not ready: Provisioning");
        assert_eq!(not_ready(&widget(cond("Ready", "Unknown"))), "Widget: not ready: Provisioning");
        assert_eq!(not_ready(&widget(cond("Reconciling", "True"))), "Widget: reconciling: Provisioning");
        assert_eq!(not_ready(&widget(cond("Stalled", "True"))), "Widget: stalled: Provisioning");
        assert_eq!(
            not_ready(&widget(json!({"observedGeneration": 3, "conditions": [{"type": "Ready", "status": "True"}]}))),
            "Widget: observedGeneration 3 < generation 4"
        );
    }
}
