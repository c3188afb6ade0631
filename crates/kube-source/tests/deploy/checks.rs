//! What must hold of every install, whatever renders it: the objects agree with each
//! other, with the command line and with the documentation.

use super::manifests::*;
use fleetsync_kube_source::crd::definitions;
use fleetsync_kube_source::{api_resource, CrKind};
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::{BTreeMap, BTreeSet};

/// The keys docs/deployment.md says the Secrets the user provides hold.
pub const DATABASE_KEYS: &[&str] = &["url"];
pub const TLS_KEYS: &[&str] = &["tls.crt", "tls.key", "ca.crt"];

/// What one install should hold, by the values it was rendered with.
pub struct Expect {
    pub namespace: &'static str,
    pub tls: bool,
    pub kube_source: bool,
    pub autoscaler: bool,
    pub budgets: usize,
    pub monitor: bool,
    /// Secrets the pods read that the install leaves to the user, with their keys.
    pub external_secrets: &'static [(&'static str, &'static [&'static str])],
}

pub fn check(origin: &str, p: &Parsed, e: &Expect) {
    kinds(origin, p, e);
    selectors(origin, p);
    probes(origin, p, e);
    accounts_and_roles(origin, p, e);
    secrets(origin, p, e);
    security(origin, p);
    placement(origin, p);
    autoscaling(origin, p, e);
    environment(origin, p);
}

fn kinds(origin: &str, p: &Parsed, e: &Expect) {
    assert_eq!(p.deployments.len(), 2, "{origin}: a hub and a worker Deployment");
    let counts = (p.services.len(), p.monitors.len(), p.pod_monitors.len(), p.autoscalers.len(), p.budgets.len());
    let want = (1, e.monitor as usize, e.monitor as usize, e.autoscaler as usize, e.budgets);
    assert_eq!(counts, want, "{origin}: Services, ServiceMonitors, PodMonitors, HPAs, PDBs");
    let crds: BTreeSet<String> = p.crds.iter().map(|c| name(c).to_string()).collect();
    let generated: BTreeSet<String> = definitions().iter().map(|c| name(c).to_string()).collect();
    assert_eq!(crds, generated, "{origin}: the generated CRDs are part of the install");
    let cluster_wide = ["Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"];
    for (kind, n, ns) in &p.placed {
        let want = (!cluster_wide.contains(&kind.as_str())).then_some(e.namespace);
        assert_eq!(ns.as_deref(), want, "{origin}: {kind} {n}'s namespace");
    }
}

fn selectors(origin: &str, p: &Parsed) {
    for d in &p.deployments {
        assert!(selects(&selector(d), &pod_labels(d)), "{origin}: {}: its selector matches its pods", name(d));
        let others = p.deployments.iter().filter(|o| name(*o) != name(d));
        assert!(
            others.into_iter().all(|o| !selects(&selector(d), &pod_labels(o))),
            "{origin}: {} selects only its own pods",
            name(d)
        );
    }
    let (hub, worker) = (deployment(p, "hub"), deployment(p, "worker"));
    let service = &p.services[0];
    let spec = service.spec.as_ref().expect("spec");
    assert!(
        selects(spec.selector.as_ref().expect("selector"), &pod_labels(hub)),
        "{origin}: the Service selects the hubs"
    );
    for port in spec.ports.as_deref().unwrap_or_default() {
        let target = port.target_port.clone().unwrap_or(IntOrString::Int(port.port));
        assert!(
            container_port(container(hub), &target).is_some(),
            "{origin}: Service port {:?} is a hub port",
            port.name
        );
    }
    for pdb in &p.budgets {
        let selector = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()).and_then(|s| s.match_labels.clone());
        let selector = selector.expect("matchLabels");
        let selected = [hub, worker].into_iter().filter(|d| selects(&selector, &pod_labels(d)));
        assert_eq!(selected.count(), 1, "{origin}: {} selects one Deployment's pods", name(pdb));
    }
    for monitor in &p.monitors {
        let selector: BTreeMap<String, String> =
            serde_json::from_value(monitor.data["spec"]["selector"]["matchLabels"].clone()).expect("matchLabels");
        let labels = service.metadata.labels.as_ref().expect("labels");
        assert!(selects(&selector, labels), "{origin}: the ServiceMonitor selects the Service");
        let ports: Vec<Option<&str>> =
            spec.ports.as_deref().unwrap_or_default().iter().map(|p| p.name.as_deref()).collect();
        for e in monitor.data["spec"]["endpoints"].as_array().expect("endpoints") {
            assert!(
                ports.contains(&e["port"].as_str()),
                "{origin}: ServiceMonitor port {} is a Service port",
                e["port"]
            );
            assert_eq!(e["path"], "/metrics", "{origin}");
        }
    }
    for monitor in &p.pod_monitors {
        let selector: BTreeMap<String, String> =
            serde_json::from_value(monitor.data["spec"]["selector"]["matchLabels"].clone()).expect("matchLabels");
        assert!(
            selects(&selector, &pod_labels(worker)) && !selects(&selector, &pod_labels(hub)),
            "{origin}: the PodMonitor selects the workers"
        );
        for e in monitor.data["spec"]["podMetricsEndpoints"].as_array().expect("endpoints") {
            let port = IntOrString::String(e["port"].as_str().expect("a port name").to_string());
            assert!(
                container_port(container(worker), &port).is_some(),
                "{origin}: PodMonitor port {} is a worker port",
                e["port"]
            );
            assert_eq!((&e["path"], &e["scheme"]), (&"/metrics".into(), &"http".into()), "{origin}");
        }
    }
}

/// The hub is probed where it listens, over what it serves (https with TLS), and the
/// Service and ServiceMonitor speak the same.
fn probes(origin: &str, p: &Parsed, e: &Expect) {
    let hub = container(deployment(p, "hub"));
    let listen = arg_after(hub, "--listen").expect("--listen");
    let listen_port: i32 = listen.rsplit(':').next().and_then(|s| s.parse().ok()).expect("a port");
    let tls = env_value(hub, "FLEETSYNC_TLS_CERT_FILE").is_some();
    assert_eq!(tls, e.tls, "{origin}: the hub serves https");
    let scheme = if tls { "https" } else { "http" };
    for (probe, path) in
        [(&hub.liveness_probe, "/livez"), (&hub.readiness_probe, "/readyz"), (&hub.startup_probe, "/livez")]
    {
        let get = probe.as_ref().and_then(|p| p.http_get.as_ref()).expect("an HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path), "{origin}");
        assert_eq!(
            container_port(hub, &get.port),
            Some(listen_port),
            "{origin}: {path} probes the port the hub listens on"
        );
        assert_eq!(get.scheme.as_deref().map(str::to_lowercase).as_deref(), Some(scheme), "{origin}: {path}'s scheme");
    }
    let worker = container(deployment(p, "worker"));
    let listen = arg_after(worker, "--listen").expect("the worker's --listen");
    let listen_port: i32 = listen.rsplit(':').next().and_then(|s| s.parse().ok()).expect("a port");
    for (probe, path) in [(&worker.liveness_probe, "/livez"), (&worker.readiness_probe, "/readyz")] {
        let get = probe.as_ref().and_then(|p| p.http_get.as_ref()).expect("an HTTP probe of the worker");
        assert_eq!(get.path.as_deref(), Some(path), "{origin}");
        assert_eq!(
            container_port(worker, &get.port),
            Some(listen_port),
            "{origin}: the worker's {path} probes where it listens"
        );
    }
    let service = &p.services[0];
    let port_names: Vec<_> =
        service.spec.iter().flat_map(|s| s.ports.iter().flatten()).map(|p| p.name.as_deref()).collect();
    assert_eq!(port_names, [Some(scheme)], "{origin}: the Service's port");
    for m in &p.monitors {
        let endpoint = &m.data["spec"]["endpoints"][0];
        assert_eq!(endpoint["scheme"], scheme, "{origin}: the ServiceMonitor scrapes over {scheme}");
        if tls {
            let server = format!("{}.{}.svc", name(service), e.namespace);
            assert_eq!(endpoint["tlsConfig"]["serverName"], server.as_str(), "{origin}: the name Prometheus verifies");
        }
    }
}

fn accounts_and_roles(origin: &str, p: &Parsed, e: &Expect) {
    let accounts: BTreeSet<&str> = p.accounts.iter().map(name).collect();
    for d in &p.deployments {
        let sa = pod(d).service_account_name.as_deref().expect("a service account");
        assert!(accounts.contains(sa), "{origin}: {}: service account {sa} exists", name(d));
    }
    let worker = pod(deployment(p, "worker"));
    assert_eq!(worker.automount_service_account_token, Some(false), "{origin}: workers get no API token");
    let roles: BTreeSet<&str> = p.roles.iter().map(name).collect();
    for b in &p.bindings {
        assert!(roles.contains(b.role_ref.name.as_str()), "{origin}: {}: role {} exists", name(b), b.role_ref.name);
        for s in b.subjects.as_deref().unwrap_or_default() {
            let ours = accounts.contains(s.name.as_str()) && s.namespace.as_deref() == Some(e.namespace);
            assert!(ours, "{origin}: {}: {s:?}", name(b));
        }
    }
    let hub = deployment(p, "hub");
    let source = container(hub).args.iter().flatten().any(|a| a == "--kube-source");
    assert_eq!(source, e.kube_source, "{origin}: the hub runs the Kubernetes source");
    assert_eq!(pod(hub).automount_service_account_token, Some(source), "{origin}: the hub's token only for the source");
    // The hub's account may do what the source does: watch both kinds, patch their status.
    let hub_sa = pod(hub).service_account_name.clone();
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
            assert_eq!(allows(&plural, verb), source, "{origin}: the hub may {verb} {plural} (only for the source)");
        }
        assert_eq!(allows(&format!("{plural}/status"), "patch"), source, "{origin}: the hub may patch {plural}/status");
    }
}

/// Every Secret key a pod or the ServiceMonitor reads is in a Secret of the install,
/// or in one the install leaves to the user with the documented keys; every Secret
/// of the install is read.
fn secrets(origin: &str, p: &Parsed, e: &Expect) {
    let mut read: Vec<(String, String)> = Vec::new();
    for d in &p.deployments {
        let c = container(d);
        for var in c.env.iter().flatten() {
            if let Some(r) = var.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref()) {
                read.push((r.name.clone(), r.key.clone()));
            }
        }
        read.extend(secret_files(d, c).into_iter().map(|(s, k)| (s.to_string(), k.to_string())));
        let db = c.env.iter().flatten().find(|v| v.name == "FLEETSYNC_DATABASE_URL");
        assert!(
            db.is_some_and(|v| v.value_from.is_some()),
            "{origin}: {} reads the database URL from a Secret",
            name(d)
        );
    }
    for m in &p.monitors {
        let ca = &m.data["spec"]["endpoints"][0]["tlsConfig"]["ca"]["secret"];
        if let (Some(n), Some(k)) = (ca["name"].as_str(), ca["key"].as_str()) {
            read.push((n.to_string(), k.to_string()));
        }
    }
    for (secret, key) in &read {
        let made = p.secrets.iter().find(|s| name(*s) == secret);
        let holds = match made {
            Some(s) => {
                s.data.iter().flatten().any(|(k, _)| k == key) || s.string_data.iter().flatten().any(|(k, _)| k == key)
            }
            None => e.external_secrets.iter().any(|(n, keys)| n == secret && keys.contains(&key.as_str())),
        };
        assert!(
            holds,
            "{origin}: Secret {secret} key {key} is neither in the install nor a documented key of a Secret it expects"
        );
    }
    for s in &p.secrets {
        assert!(read.iter().any(|(n, _)| n == name(s)), "{origin}: Secret {} is read", name(s));
    }
}

/// The (Secret, key) of each file a container's environment names in a mounted Secret.
fn secret_files<'a>(d: &'a k8s_openapi::api::apps::v1::Deployment, c: &'a Container) -> Vec<(&'a str, &'a str)> {
    let volumes = pod(d).volumes.iter().flatten();
    let secret_mounts: Vec<(&str, &str)> = volumes
        .filter_map(|v| {
            let secret = v.secret.as_ref()?.secret_name.as_deref()?;
            let mount = c.volume_mounts.iter().flatten().find(|m| m.name == v.name)?;
            Some((mount.mount_path.as_str(), secret))
        })
        .collect();
    let values = c.env.iter().flatten().filter_map(|v| v.value.as_deref());
    values
        .filter_map(|path| {
            secret_mounts.iter().find_map(|(dir, s)| Some((*s, path.strip_prefix(dir)?.strip_prefix('/')?)))
        })
        .collect()
}

fn security(origin: &str, p: &Parsed) {
    for d in &p.deployments {
        assert_eq!(
            pod(d).security_context.as_ref().and_then(|s| s.run_as_non_root),
            Some(true),
            "{origin}: {}",
            name(d)
        );
        let c = container(d).security_context.as_ref().expect("container securityContext");
        let root = (c.read_only_root_filesystem, c.allow_privilege_escalation);
        assert_eq!(root, (Some(true), Some(false)), "{origin}: {} read-only, no escalation", name(d));
        assert_eq!(
            c.capabilities.as_ref().and_then(|c| c.drop.clone()),
            Some(vec!["ALL".to_string()]),
            "{origin}: {}",
            name(d)
        );
        assert!(
            container(d).resources.as_ref().is_some_and(|r| r.requests.is_some()),
            "{origin}: {} requests resources",
            name(d)
        );
    }
}

/// Each Deployment's pods spread over nodes (an anti-affinity by hostname to its own
/// pods), and hubs, which run workers too, get the workers' time to finish on stop.
fn placement(origin: &str, p: &Parsed) {
    for d in &p.deployments {
        let anti = pod(d).affinity.as_ref().and_then(|a| a.pod_anti_affinity.as_ref());
        let terms = anti.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref());
        let spreads = terms.into_iter().flatten().any(|t| {
            let term = &t.pod_affinity_term;
            let own = term.label_selector.as_ref().and_then(|s| s.match_labels.clone()).unwrap_or_default();
            term.topology_key == "kubernetes.io/hostname" && selects(&own, &pod_labels(d))
        });
        assert!(spreads, "{origin}: {}'s pods prefer nodes without another of them", name(d));
    }
    let grace: BTreeSet<Option<i64>> = p.deployments.iter().map(|d| pod(d).termination_grace_period_seconds).collect();
    assert_eq!(grace.len(), 1, "{origin}: hubs and workers get the same time to stop: {grace:?}");
}

/// The autoscaler scales the workers on a metric the hub exports and the adapter rule
/// of docs/deployment.md serves; with it, the Deployment leaves the count to it.
fn autoscaling(origin: &str, p: &Parsed, e: &Expect) {
    let worker = deployment(p, "worker");
    assert_eq!(
        worker.spec.replicas.is_none(),
        e.autoscaler,
        "{origin}: worker replicas set only without the autoscaler"
    );
    for hpa in &p.autoscalers {
        let spec = &hpa.spec;
        let target = &spec.scale_target_ref;
        assert_eq!((target.kind.as_str(), target.name.as_str()), ("Deployment", name(worker)), "{origin}");
        assert!(spec.min_replicas.unwrap_or(1) <= spec.max_replicas, "{origin}: min <= max");
        let metric = spec.metrics.iter().flatten().find_map(|m| m.external.as_ref()).expect("an External metric");
        let metric = metric.metric.name.as_str();
        let deployment =
            std::fs::read_to_string(deploy_dir().join("../docs/deployment.md")).expect("docs/deployment.md");
        let rule = adapter_rule(&deployment, metric)
            .unwrap_or_else(|| panic!("{origin}: docs/deployment.md has the adapter rule for {metric}"));
        let operations =
            std::fs::read_to_string(deploy_dir().join("../docs/operations.md")).expect("docs/operations.md");
        let series: Vec<&str> =
            rule.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| w.starts_with("fleetsync_")).collect();
        assert!(!series.is_empty(), "{origin}: the rule for {metric} reads fleetsync's series: {rule}");
        for s in series.iter().filter(|s| **s != metric) {
            assert!(
                operations.contains(&format!("`{s}`")),
                "{origin}: {s}, which the rule for {metric} reads, is in docs/operations.md's metrics"
            );
        }
    }
}

/// Every FLEETSYNC_ variable the pods set is one the command line (crates/cli/src/args/) reads.
fn environment(origin: &str, p: &Parsed) {
    let dir = deploy_dir().join("../crates/cli/src/args");
    let mut args = String::new();
    for entry in std::fs::read_dir(&dir).expect("crates/cli/src/args") {
        let path = entry.expect("crates/cli/src/args").path();
        args += &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    for d in &p.deployments {
        for var in container(d).env.iter().flatten().filter(|v| v.name.starts_with("FLEETSYNC_")) {
            assert!(
                args.contains(&format!("env = \"{}\"", var.name)),
                "{origin}: {} sets {}, which fleetsync does not read",
                name(d),
                var.name
            );
        }
    }
}

/// The prometheus-adapter rule in `doc` that serves `metric` (named `as:` it, or the
/// series itself): its lines, from its `- seriesQuery:` to the next rule or the end
/// of its block.
fn adapter_rule(doc: &str, metric: &str) -> Option<String> {
    let mut rules: Vec<Vec<&str>> = Vec::new();
    for line in doc.lines() {
        if line.trim_start().starts_with("- seriesQuery:") {
            rules.push(vec![line]);
        } else if line.starts_with("```") || line.trim().is_empty() {
            rules.push(Vec::new());
        } else if let Some(rule) = rules.last_mut().filter(|r| !r.is_empty()) {
            rule.push(line);
        }
    }
    let serves = |rule: &&Vec<&str>| {
        let text = rule.join("\n");
        text.contains(&format!("as: {metric}"))
            || (text.contains(&format!("seriesQuery: '{metric}'")) && !text.contains("as: "))
    };
    rules.iter().find(serves).map(|r| r.join("\n"))
}
