//! How fleetsync is installed in Kubernetes: the Helm chart (`deploy/helm/fleetsync`)
//! and the kustomize directory rendered from it (`deploy/kubernetes`).
//!
//! Every object each renders parses into its typed Kubernetes struct with no field
//! left over (a misspelt field fails), and the objects agree: selectors match pod
//! labels, probes and Service ports name container ports, service accounts and roles
//! exist, the role grants what the Kubernetes source does, Secrets read are made or
//! documented. Helm comes from testkit's tools (installed from PyPI as root).
//!
//! After changing the chart, regenerate `deploy/kubernetes/fleetsync.yaml` with
//! `FLEETSYNC_UPDATE_MANIFESTS=1 cargo test --workspace --test deploy`.

mod checks;
mod helm;
mod manifests;

use checks::{check, Expect, DATABASE_KEYS, TLS_KEYS};
use helm::{ci_values, RELEASE};
use manifests::{deploy_dir, documents, parse, read};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

const UPDATE: &str = "FLEETSYNC_UPDATE_MANIFESTS";

/// The Secrets the chart expects, by default, the user to create.
const USERS_SECRETS: &[(&str, &[&str])] = &[("fleetsync-database", DATABASE_KEYS), ("fleetsync-tls", TLS_KEYS)];

/// The defaults, as `helm install` without values gives them.
const DEFAULTS: Expect = Expect {
    namespace: RELEASE,
    tls: true,
    kube_source: true,
    autoscaler: true,
    budgets: 2,
    monitor: false,
    external_secrets: USERS_SECRETS,
};

/// The chart rendered with its defaults or a values file of its `ci/` directory, CRDs
/// included, and checked against `expect`.
fn rendered_and_checked(values: Option<&str>, expect: &Expect) {
    let origin = format!("helm template{}", values.map(|f| format!(" -f ci/{f}")).unwrap_or_default());
    let file = values.map(ci_values);
    let args: Vec<&str> = file.iter().flat_map(|f| ["-f", f.as_str()]).chain(["--include-crds"]).collect();
    let text = helm::template(&args).unwrap_or_else(|e| panic!("{origin}: {e}"));
    check(&origin, &parse(&origin, &documents(&origin, &text)), expect);
}

#[test]
fn the_chart_with_its_defaults() {
    rendered_and_checked(None, &DEFAULTS);
}

#[test]
fn the_chart_with_every_option_on_and_the_secrets_it_makes() {
    rendered_and_checked(Some("everything-values.yaml"), &Expect { monitor: true, external_secrets: &[], ..DEFAULTS });
}

#[test]
fn the_chart_with_secrets_of_your_own() {
    let secrets: &[(&str, &[&str])] = &[("my-database", DATABASE_KEYS), ("my-certificate", TLS_KEYS)];
    rendered_and_checked(
        Some("existing-secrets-values.yaml"),
        &Expect { monitor: true, external_secrets: secrets, ..DEFAULTS },
    );
}

#[test]
fn the_chart_with_plain_http_and_nothing_optional() {
    let expect = Expect { tls: false, kube_source: false, autoscaler: false, budgets: 0, monitor: true, ..DEFAULTS };
    let secrets: &[(&str, &[&str])] = &[("fleetsync-database", DATABASE_KEYS)];
    rendered_and_checked(Some("plain-http-values.yaml"), &Expect { external_secrets: secrets, ..expect });
}

#[test]
fn the_chart_lints_strictly() {
    let files = ["everything-values.yaml", "existing-secrets-values.yaml", "plain-http-values.yaml"];
    let runs = std::iter::once(Vec::new()).chain(files.iter().map(|f| vec!["-f".to_string(), ci_values(f)]));
    for args in runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = helm::lint(&args).unwrap_or_else(|e| panic!("helm lint --strict {args:?}: {e}"));
        assert!(out.contains("0 chart(s) failed"), "helm lint --strict {args:?}: {out}");
    }
}

/// Values the schema or the templates refuse, and what the refusal names.
#[test]
fn bad_values_fail_rendering() {
    let bad = [
        ("hub.replicas=-1", "hub.replicas"),
        ("worker.replicas=two", "worker.replicas"),
        ("hub.replica=3", "replica"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("worker.autoscaling.minReplicas=0", "minReplicas"),
        ("worker.autoscaling.minReplicas=30", "minReplicas is more than maxReplicas"),
        ("worker.autoscaling.target=lots", "target"),
        ("database.url=postgres://db,database.existingSecret=mine", "url or existingSecret"),
        ("tls.cert=PEM", "cert and key go together"),
        ("tls.cert=PEM,tls.key=PEM,serviceMonitor.enabled=true", "tls.ca"),
    ];
    for (set, names) in bad {
        match helm::template(&["--set", set]) {
            Ok(_) => panic!("--set {set} rendered"),
            Err(e) => assert!(e.contains(names), "--set {set} fails naming {names}: {e}"),
        }
    }
    assert!(helm::template(&["--set", "hub.replicas=0"]).is_ok(), "the refusals above are the values', not helm's");
}

#[test]
fn the_chart_installs_this_version() {
    let chart: Value = read(&helm::chart_dir().join("Chart.yaml")).remove(0);
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"), "Chart.yaml's appVersion is the workspace's version");
    let text = helm::template(&[]).expect("helm template");
    let image = format!("image: ghcr.io/example/fleetsync:{}", env!("CARGO_PKG_VERSION"));
    assert!(text.contains(&image), "the default image is this version's");
}

/// The kustomize directory is the chart rendered with `deploy/kubernetes/values.yaml`
/// (CRDs apart: it lists `../crds`), byte for byte, and what `kubectl apply -k`
/// installs from it holds together as the chart's renderings do (the CRDs and the
/// namespace come from the kustomization).
#[test]
fn the_kustomize_directory_is_the_charts_rendering_of_a_whole_hub() {
    let values = deploy_dir().join("kubernetes/values.yaml").display().to_string();
    let rendered = helm::template(&["-f", &values]).unwrap_or_else(|e| panic!("helm template: {e}"));
    let expected = format!(
        "# Generated by `helm template {RELEASE} deploy/helm/fleetsync --namespace {RELEASE} -f deploy/kubernetes/values.yaml`: do not edit.\n\
         # Regenerate: {UPDATE}=1 cargo test --workspace --test deploy\n{rendered}"
    );
    shipped_as_rendered(&deploy_dir().join("kubernetes/fleetsync.yaml"), &expected);
    let dir = deploy_dir().join("kubernetes");
    let (objects, listed) = kustomization(&dir);
    let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("deploy/kubernetes")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|f| f.ends_with(".yaml") && !["kustomization.yaml", "values.yaml"].contains(&f.as_str()))
        .collect();
    assert!(
        on_disk.iter().all(|f| listed.contains(f)),
        "every manifest is in kustomization.yaml: {on_disk:?} vs {listed:?}"
    );
    let kustomization: Value = read(&dir.join("kustomization.yaml")).remove(0);
    assert_eq!(kustomization["namespace"], RELEASE, "the namespace the chart was rendered for");
    let parsed = parse("deploy/kubernetes", &objects);
    assert_eq!(parsed.namespaces.iter().map(manifests::name).collect::<Vec<_>>(), [RELEASE], "it makes its namespace");
    // No Prometheus Operator object: the base applies to a cluster without it.
    check("deploy/kubernetes", &parsed, &Expect { monitor: false, ..DEFAULTS });
}

/// The monitoring component (`deploy/kubernetes/components/monitoring`) holds the
/// ServiceMonitor and PodMonitor the chart renders with `serviceMonitor.enabled`, byte
/// for byte; the base with it holds together as the chart with monitors does.
#[test]
fn the_monitoring_component_adds_the_prometheus_operator_objects() {
    let values = deploy_dir().join("kubernetes/values.yaml").display().to_string();
    let rendered = helm::template(&["-f", &values, "--set", "serviceMonitor.enabled=true"])
        .unwrap_or_else(|e| panic!("helm template: {e}"));
    let monitors: Vec<&str> = rendered
        .split("\n---\n")
        .map(|d| d.trim_start_matches("---\n"))
        .filter(|d| d.contains("\nkind: ServiceMonitor\n") || d.contains("\nkind: PodMonitor\n"))
        .collect();
    assert_eq!(monitors.len(), 2, "a ServiceMonitor and a PodMonitor");
    let expected = format!(
        "# Generated by `helm template {RELEASE} deploy/helm/fleetsync --namespace {RELEASE} -f deploy/kubernetes/values.yaml \
         --set serviceMonitor.enabled=true` (its ServiceMonitor and PodMonitor): do not edit.\n\
         # Regenerate: {UPDATE}=1 cargo test --workspace --test deploy\n---\n{}\n",
        monitors.join("\n---\n").trim_end()
    );
    let dir = deploy_dir().join("kubernetes/components/monitoring");
    shipped_as_rendered(&dir.join("monitors.yaml"), &expected);
    let component: Value = read(&dir.join("kustomization.yaml")).remove(0);
    assert_eq!(component["kind"], "Component", "a kustomize component");
    let (mut objects, _) = kustomization(&deploy_dir().join("kubernetes"));
    objects.extend(kustomization(&dir).0);
    check(
        "deploy/kubernetes with the monitoring component",
        &parse("monitoring", &objects),
        &Expect { monitor: true, ..DEFAULTS },
    );
}

/// The file at `path` holds `expected`, the chart's rendering (written there first
/// with `FLEETSYNC_UPDATE_MANIFESTS`).
fn shipped_as_rendered(path: &Path, expected: &str) {
    if std::env::var_os(UPDATE).is_some() {
        std::fs::write(path, expected).expect("write");
    }
    let shipped = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        shipped == expected,
        "{} is not the chart's rendering: run {UPDATE}=1 cargo test --workspace --test deploy",
        path.display()
    );
}

/// The objects of the kustomization in `dir` (following directories it names), and
/// the files it lists there.
fn kustomization(dir: &Path) -> (Vec<Value>, Vec<String>) {
    let file: Value = read(&dir.join("kustomization.yaml")).remove(0);
    let (mut objects, mut listed) = (Vec::new(), Vec::new());
    for r in file["resources"].as_array().expect("resources") {
        let path = dir.join(r.as_str().expect("a path"));
        if path.is_dir() {
            objects.extend(kustomization(&path).0);
        } else {
            objects.extend(read(&path));
            listed.push(path.file_name().and_then(|f| f.to_str()).unwrap_or_default().to_string());
        }
    }
    (objects, listed)
}

/// docs/deployment.md names the keys of the Secrets users bring.
#[test]
fn the_docs_name_the_secrets_keys() {
    let docs = std::fs::read_to_string(deploy_dir().join("../docs/deployment.md")).expect("docs/deployment.md");
    for key in DATABASE_KEYS.iter().chain(TLS_KEYS) {
        assert!(docs.contains(&format!("`{key}`")), "docs/deployment.md names the Secret key {key}");
    }
}
