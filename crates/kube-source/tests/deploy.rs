//! The Kubernetes manifests shipped in `deploy/kubernetes/`: every object parses
//! into its typed Kubernetes struct with no field left over (a misspelt field
//! fails), and the objects agree with each other: selectors match pod labels,
//! probes and Service ports name container ports, service accounts and roles
//! exist, the role grants what the Kubernetes source does, Secrets are the
//! documented ones.

use fleetsync_kube_source::crd::definitions;
use fleetsync_kube_source::{api_resource, CrKind};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Container, Namespace, PodTemplateSpec, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::DynamicObject;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn deploy() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every object of the kustomization, as YAML gives it, with the file it is in.
fn objects() -> Vec<(String, Value)> {
    let dir = deploy().join("kubernetes");
    let (out, listed) = kustomization(&dir);
    let listed: BTreeSet<String> =
        listed.iter().filter_map(|f| Path::new(f).file_name()?.to_str().map(String::from)).collect();
    let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("deploy/kubernetes")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|f| f.ends_with(".yaml") && f != "kustomization.yaml")
        .collect();
    assert!(on_disk.is_subset(&listed), "every manifest is in kustomization.yaml: {on_disk:?} vs {listed:?}");
    out
}

/// The objects of the kustomization in `dir` (following directories it names), and
/// the files it lists.
fn kustomization(dir: &Path) -> (Vec<(String, Value)>, Vec<String>) {
    let file: Value = read(&dir.join("kustomization.yaml")).remove(0);
    let resources = file["resources"].as_array().expect("resources");
    let (mut out, mut listed) = (Vec::new(), Vec::new());
    for r in resources {
        let path = dir.join(r.as_str().expect("a path"));
        if path.is_dir() {
            out.extend(kustomization(&path).0);
        } else {
            let file = path.file_name().and_then(|f| f.to_str()).unwrap_or_default().to_string();
            out.extend(read(&path).into_iter().map(|o| (file.clone(), o)));
            listed.push(file);
        }
    }
    (out, listed)
}

fn read(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// `value` as a `T`, which must give back every field it was given.
fn typed<T: DeserializeOwned + Serialize>(file: &str, value: &Value) -> T {
    let t: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{file}: {e}: {value}"));
    let back = serde_json::to_value(&t).expect("json");
    if let Some(missing) = first_dropped(value, &back, String::new()) {
        panic!("{file}: {missing} is not a field of {}", value["kind"]);
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

#[derive(Default)]
struct Parsed {
    deployments: Vec<Deployment>,
    services: Vec<Service>,
    accounts: Vec<ServiceAccount>,
    roles: Vec<ClusterRole>,
    bindings: Vec<ClusterRoleBinding>,
    budgets: Vec<PodDisruptionBudget>,
    autoscalers: Vec<HorizontalPodAutoscaler>,
    monitors: Vec<DynamicObject>,
    crds: Vec<CustomResourceDefinition>,
    namespaces: Vec<Namespace>,
}

fn parse() -> Parsed {
    let mut p = Parsed::default();
    for (file, o) in objects() {
        let kind = (o["apiVersion"].as_str().unwrap_or_default(), o["kind"].as_str().unwrap_or_default());
        match kind {
            ("apps/v1", "Deployment") => p.deployments.push(typed(&file, &o)),
            ("v1", "Service") => p.services.push(typed(&file, &o)),
            ("v1", "ServiceAccount") => p.accounts.push(typed(&file, &o)),
            ("v1", "Namespace") => p.namespaces.push(typed(&file, &o)),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => p.roles.push(typed(&file, &o)),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => p.bindings.push(typed(&file, &o)),
            ("policy/v1", "PodDisruptionBudget") => p.budgets.push(typed(&file, &o)),
            ("autoscaling/v2", "HorizontalPodAutoscaler") => p.autoscalers.push(typed(&file, &o)),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => p.crds.push(typed(&file, &o)),
            ("monitoring.coreos.com/v1", "ServiceMonitor") => {
                let m: DynamicObject = serde_json::from_value(o.clone()).unwrap_or_else(|e| panic!("{file}: {e}"));
                assert!(m.data["spec"]["endpoints"].is_array(), "{file}: a ServiceMonitor with endpoints");
                p.monitors.push(m);
            }
            other => panic!("{file}: an object this test does not know: {other:?}"),
        }
    }
    p
}

fn name<T: kube::Resource>(o: &T) -> &str {
    o.meta().name.as_deref().unwrap_or_default()
}

fn deployment<'a>(p: &'a Parsed, n: &str) -> &'a Deployment {
    p.deployments.iter().find(|d| name(*d) == n).unwrap_or_else(|| panic!("a Deployment {n}"))
}

fn template(d: &Deployment) -> &PodTemplateSpec {
    &d.spec.template
}

fn pod_labels(d: &Deployment) -> BTreeMap<String, String> {
    template(d).metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default()
}

fn container(d: &Deployment) -> &Container {
    &template(d).spec.as_ref().expect("pod spec").containers[0]
}

/// Whether `selector` (matchLabels) selects pods labelled `labels`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The number of the container port `port` names (by name or number).
fn container_port(c: &Container, port: &IntOrString) -> Option<i32> {
    let ports = c.ports.as_deref().unwrap_or_default();
    match port {
        IntOrString::Int(n) => ports.iter().find(|p| p.container_port == *n).map(|p| p.container_port),
        IntOrString::String(s) => ports.iter().find(|p| p.name.as_deref() == Some(s)).map(|p| p.container_port),
    }
}

fn arg_after<'a>(c: &'a Container, flag: &str) -> Option<&'a str> {
    let args = c.args.as_deref().unwrap_or_default();
    args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).map(String::as_str)
}

#[test]
fn every_object_parses_into_its_typed_struct() {
    let p = parse();
    assert_eq!(p.deployments.len(), 2);
    assert_eq!((p.services.len(), p.monitors.len(), p.autoscalers.len(), p.budgets.len()), (1, 1, 1, 2));
    let crd_names: BTreeSet<String> = p.crds.iter().map(|c| name(c).to_string()).collect();
    let generated: BTreeSet<String> = definitions().iter().map(|c| name(c).to_string()).collect();
    assert_eq!(crd_names, generated, "the generated CRDs are part of the install");
}

#[test]
fn selectors_match_pods_and_controllers_exist() {
    let p = parse();
    for d in &p.deployments {
        let selector = d.spec.selector.match_labels.clone().unwrap_or_default();
        assert!(selects(&selector, &pod_labels(d)), "{}: its selector matches its pods", name(d));
        let others = p.deployments.iter().filter(|o| name(*o) != name(d));
        assert!(others.into_iter().all(|o| !selects(&selector, &pod_labels(o))), "{}: selects only its own pods", name(d));
    }
    let hub = deployment(&p, "fleetsync-hub");
    let worker = deployment(&p, "fleetsync-worker");
    let service = &p.services[0];
    let spec = service.spec.as_ref().expect("spec");
    assert!(selects(spec.selector.as_ref().expect("selector"), &pod_labels(hub)), "the Service selects the hubs");
    for port in spec.ports.as_deref().unwrap_or_default() {
        let target = port.target_port.clone().unwrap_or(IntOrString::Int(port.port));
        assert!(container_port(container(hub), &target).is_some(), "Service port {:?} is a hub container port", port.name);
    }
    for pdb in &p.budgets {
        let selector = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()).and_then(|s| s.match_labels.clone());
        let selected = [hub, worker].into_iter().filter(|d| selects(selector.as_ref().expect("matchLabels"), &pod_labels(d)));
        assert_eq!(selected.count(), 1, "{}: selects one Deployment's pods", name(pdb));
    }
    let hpa = &p.autoscalers[0].spec;
    assert_eq!((hpa.scale_target_ref.kind.as_str(), hpa.scale_target_ref.name.as_str()), ("Deployment", name(worker)));
    let monitor = &p.monitors[0];
    let selector: BTreeMap<String, String> =
        serde_json::from_value(monitor.data["spec"]["selector"]["matchLabels"].clone()).expect("matchLabels");
    assert!(selects(&selector, service.metadata.labels.as_ref().expect("labels")), "the ServiceMonitor selects the Service");
    let port_names: Vec<Option<&str>> = spec.ports.as_deref().unwrap_or_default().iter().map(|p| p.name.as_deref()).collect();
    for e in monitor.data["spec"]["endpoints"].as_array().expect("endpoints") {
        assert!(port_names.contains(&e["port"].as_str()), "ServiceMonitor port {} is a Service port", e["port"]);
        assert_eq!(e["path"], "/metrics");
    }
}

#[test]
fn the_hub_is_probed_where_it_listens() {
    let p = parse();
    let hub = container(deployment(&p, "fleetsync-hub"));
    let listen = arg_after(hub, "--listen").expect("--listen");
    let listen_port: i32 = listen.rsplit(':').next().and_then(|s| s.parse().ok()).expect("a port");
    let tls = hub.env.as_deref().unwrap_or_default().iter().any(|e| e.name == "FLEETSYNC_TLS_CERT_FILE");
    for (probe, path) in [(&hub.liveness_probe, "/livez"), (&hub.readiness_probe, "/readyz"), (&hub.startup_probe, "/livez")] {
        let get = probe.as_ref().and_then(|p| p.http_get.as_ref()).expect("an HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(container_port(hub, &get.port), Some(listen_port), "{path} probes the port the hub listens on");
        assert_eq!(get.scheme.as_deref() == Some("HTTPS"), tls, "{path}: the scheme the hub serves");
    }
}

#[test]
fn accounts_roles_and_secrets_agree() {
    let p = parse();
    let accounts: BTreeSet<&str> = p.accounts.iter().map(name).collect();
    let namespace = name(&p.namespaces[0]);
    for d in &p.deployments {
        let sa = template(d).spec.as_ref().and_then(|s| s.service_account_name.as_deref()).expect("a service account");
        assert!(accounts.contains(sa), "{}: service account {sa} exists", name(d));
    }
    let roles: BTreeSet<&str> = p.roles.iter().map(name).collect();
    for b in &p.bindings {
        assert!(roles.contains(b.role_ref.name.as_str()), "{}: role {} exists", name(b), b.role_ref.name);
        for s in b.subjects.as_deref().unwrap_or_default() {
            assert!(accounts.contains(s.name.as_str()) && s.namespace.as_deref() == Some(namespace), "{}: {s:?}", name(b));
        }
    }
    // The hub's account may do what the source does: watch both kinds, patch their status.
    let hub_sa = template(deployment(&p, "fleetsync-hub")).spec.as_ref().and_then(|s| s.service_account_name.clone());
    let bound: Vec<&ClusterRole> = p
        .bindings
        .iter()
        .filter(|b| b.subjects.as_deref().unwrap_or_default().iter().any(|s| Some(&s.name) == hub_sa.as_ref()))
        .filter_map(|b| p.roles.iter().find(|r| name(*r) == b.role_ref.name))
        .collect();
    let allows = |resource: &str, verb: &str| {
        bound.iter().flat_map(|r| r.rules.as_deref().unwrap_or_default()).any(|rule| {
            rule.api_groups.as_deref().unwrap_or_default().iter().any(|g| g == "fleetsync.io")
                && rule.resources.as_deref().unwrap_or_default().iter().any(|r| r == resource)
                && rule.verbs.iter().any(|v| v == verb)
        })
    };
    for kind in CrKind::ALL {
        let plural = api_resource(kind).plural;
        for verb in ["get", "list", "watch"] {
            assert!(allows(&plural, verb), "the hub may {verb} {plural}");
        }
        assert!(allows(&format!("{plural}/status"), "patch"), "the hub may patch {plural}/status");
    }
    // Both read the database URL from the same Secret; the hub's TLS files come from its Secret.
    for d in &p.deployments {
        let env = container(d).env.as_deref().unwrap_or_default();
        let db = env.iter().find(|e| e.name == "FLEETSYNC_DATABASE_URL").expect("FLEETSYNC_DATABASE_URL");
        let secret = db.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref()).expect("from a Secret");
        assert_eq!((secret.name.as_str(), secret.key.as_str()), ("fleetsync-database", "url"), "{}", name(d));
    }
    let hub = deployment(&p, "fleetsync-hub");
    let volumes = template(hub).spec.as_ref().and_then(|s| s.volumes.clone()).unwrap_or_default();
    let tls = volumes.iter().find(|v| v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some("fleetsync-tls"));
    let tls = tls.expect("the TLS Secret mounted");
    let mount = container(hub).volume_mounts.as_deref().unwrap_or_default().iter().find(|m| m.name == tls.name).expect("mounted");
    for var in ["FLEETSYNC_TLS_CERT_FILE", "FLEETSYNC_TLS_PRIVATE_KEY_FILE"] {
        let env = container(hub).env.as_deref().unwrap_or_default();
        let value = env.iter().find(|e| e.name == var).and_then(|e| e.value.as_deref()).expect(var);
        assert!(value.starts_with(&format!("{}/", mount.mount_path)), "{var} is in the mounted Secret");
    }
}

#[test]
fn pods_run_as_non_root_with_a_read_only_root() {
    let p = parse();
    for d in &p.deployments {
        let pod = template(d).spec.as_ref().expect("pod spec");
        assert_eq!(pod.security_context.as_ref().and_then(|s| s.run_as_non_root), Some(true), "{}", name(d));
        let c = container(d).security_context.as_ref().expect("container securityContext");
        assert_eq!((c.read_only_root_filesystem, c.allow_privilege_escalation), (Some(true), Some(false)), "{}", name(d));
        assert_eq!(c.capabilities.as_ref().and_then(|c| c.drop.clone()), Some(vec!["ALL".to_string()]), "{}", name(d));
    }
}
