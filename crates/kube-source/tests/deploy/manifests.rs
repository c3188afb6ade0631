//! Manifests read into typed Kubernetes structs, refusing any field a struct does not
//! know, and the lookups the checks share.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Container, Namespace, PodSpec, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::DynamicObject;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// The YAML documents of `text` (from `origin`), empty ones left out.
pub fn documents(origin: &str, text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{origin}: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

pub fn read(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    documents(&path.display().to_string(), &text)
}

/// `value` as a `T`, which must give back every field it was given. Messages name
/// the object, never its content (a Secret's values stay out of the log).
fn typed<T: DeserializeOwned + Serialize>(origin: &str, value: &Value) -> T {
    let what = format!("{origin}: {} {}", value["kind"], value["metadata"]["name"]);
    let t: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let back = serde_json::to_value(&t).expect("json");
    if let Some(missing) = first_dropped(value, &back, String::new()) {
        panic!("{what}: {missing} is not a field of {}", value["kind"]);
    }
    t
}

/// The first field of `given` that `kept` does not have.
fn first_dropped(given: &Value, kept: &Value, at: String) -> Option<String> {
    match (given, kept) {
        (Value::Object(g), Value::Object(k)) => g.iter().find_map(|(name, v)| match k.get(name) {
            None if !v.is_null() => Some(format!("{at}.{name}")),
            None => None,
            Some(kv) => first_dropped(v, kv, format!("{at}.{name}")),
        }),
        (Value::Array(g), Value::Array(k)) => {
            g.iter().zip(k).enumerate().find_map(|(i, (g, k))| first_dropped(g, k, format!("{at}[{i}]")))
        }
        _ => None,
    }
}

/// The objects of one install, by kind.
#[derive(Default)]
pub struct Parsed {
    pub deployments: Vec<Deployment>,
    pub services: Vec<Service>,
    pub accounts: Vec<ServiceAccount>,
    pub roles: Vec<ClusterRole>,
    pub bindings: Vec<ClusterRoleBinding>,
    pub budgets: Vec<PodDisruptionBudget>,
    pub autoscalers: Vec<HorizontalPodAutoscaler>,
    pub monitors: Vec<DynamicObject>,
    pub pod_monitors: Vec<DynamicObject>,
    pub crds: Vec<CustomResourceDefinition>,
    pub namespaces: Vec<Namespace>,
    pub secrets: Vec<Secret>,
    /// Every object's (kind, name, metadata.namespace).
    pub placed: Vec<(String, String, Option<String>)>,
}

pub fn parse(origin: &str, objects: &[Value]) -> Parsed {
    let mut p = Parsed::default();
    for o in objects {
        let kind = (o["apiVersion"].as_str().unwrap_or_default(), o["kind"].as_str().unwrap_or_default());
        match kind {
            ("apps/v1", "Deployment") => p.deployments.push(typed(origin, o)),
            ("v1", "Service") => p.services.push(typed(origin, o)),
            ("v1", "ServiceAccount") => p.accounts.push(typed(origin, o)),
            ("v1", "Namespace") => p.namespaces.push(typed(origin, o)),
            ("v1", "Secret") => p.secrets.push(typed(origin, o)),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => p.roles.push(typed(origin, o)),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => p.bindings.push(typed(origin, o)),
            ("policy/v1", "PodDisruptionBudget") => p.budgets.push(typed(origin, o)),
            ("autoscaling/v2", "HorizontalPodAutoscaler") => p.autoscalers.push(typed(origin, o)),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => p.crds.push(typed(origin, o)),
            ("monitoring.coreos.com/v1", "ServiceMonitor") => {
                let m: DynamicObject = serde_json::from_value(o.clone()).unwrap_or_else(|e| panic!("{origin}: {e}"));
                assert!(m.data["spec"]["endpoints"].is_array(), "{origin}: a ServiceMonitor with endpoints");
                p.monitors.push(m);
            }
            ("monitoring.coreos.com/v1", "PodMonitor") => {
                let m: DynamicObject = serde_json::from_value(o.clone()).unwrap_or_else(|e| panic!("{origin}: {e}"));
                assert!(m.data["spec"]["podMetricsEndpoints"].is_array(), "{origin}: a PodMonitor with endpoints");
                p.pod_monitors.push(m);
            }
            other => panic!("{origin}: an object this test does not know: {other:?}"),
        }
        let meta = &o["metadata"];
        let at = |f: &str| meta[f].as_str().map(String::from);
        p.placed.push((kind.1.to_string(), at("name").unwrap_or_default(), at("namespace")));
    }
    p
}

pub fn name<T: kube::Resource>(o: &T) -> &str {
    o.meta().name.as_deref().unwrap_or_default()
}

/// The Deployment whose name ends with `-{component}` (`hub`, `worker`).
pub fn deployment<'a>(p: &'a Parsed, component: &str) -> &'a Deployment {
    let suffix = format!("-{component}");
    p.deployments.iter().find(|d| name(*d).ends_with(&suffix)).unwrap_or_else(|| panic!("a Deployment *{suffix}"))
}

pub fn pod(d: &Deployment) -> &PodSpec {
    d.spec.template.spec.as_ref().expect("a pod spec")
}

pub fn pod_labels(d: &Deployment) -> BTreeMap<String, String> {
    d.spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default()
}

pub fn selector(d: &Deployment) -> BTreeMap<String, String> {
    d.spec.selector.match_labels.clone().unwrap_or_default()
}

pub fn container(d: &Deployment) -> &Container {
    &pod(d).containers[0]
}

/// Whether `selector` (matchLabels) selects pods labelled `labels`.
pub fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The number of the container port `port` names (by name or number).
pub fn container_port(c: &Container, port: &IntOrString) -> Option<i32> {
    let ports = c.ports.as_deref().unwrap_or_default();
    match port {
        IntOrString::Int(n) => ports.iter().find(|p| p.container_port == *n).map(|p| p.container_port),
        IntOrString::String(s) => ports.iter().find(|p| p.name.as_deref() == Some(s)).map(|p| p.container_port),
    }
}

pub fn arg_after<'a>(c: &'a Container, flag: &str) -> Option<&'a str> {
    let args = c.args.as_deref().unwrap_or_default();
    args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).map(String::as_str)
}

pub fn env_value<'a>(c: &'a Container, var: &str) -> Option<&'a str> {
    c.env.as_deref().unwrap_or_default().iter().find(|e| e.name == var).and_then(|e| e.value.as_deref())
}
