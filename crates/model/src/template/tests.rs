use super::*;
use crate::document::{parse_documents, Document};

fn docs(yaml: &str) -> Vec<Document> {
    parse_documents(yaml).expect("valid")
}

fn cluster(name: &str, region: &str, extra: &str) -> Cluster {
    let yaml = format!(
        "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: {name}, labels: {{region: {region}}}, annotations: {{owner: team-{region}}}}}\nspec: {{endpoint: {{simulator: {{}}}}{extra}}}\n"
    );
    match docs(&yaml).remove(0) {
        Document::Cluster(c) => c,
        _ => unreachable!(),
    }
}

fn syncset(body: &str) -> crate::SyncSet {
    let yaml = format!("apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: app}}\nspec:\n  clusterSelector: {{}}\n  templated: true\n{body}");
    match docs(&yaml).remove(0) {
        Document::SyncSet(s) => s,
        _ => unreachable!(),
    }
}

fn refused(body: &str) -> crate::FieldError {
    let yaml = format!("apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: app}}\nspec:\n  clusterSelector: {{}}\n  templated: true\n{body}");
    let e = parse_documents(&yaml).expect_err("refused");
    let crate::ParseError::Invalid(v) = e else { panic!("not a validation error: {e}") };
    crate::FieldError::new(v.field, v.rule)
}

const REGIONAL: &str = r#"  values: {replicas: 2, tier: {name: web, size: s}}
  targetCustomizations:
    - clusterSelector: {matchLabels: {region: eu}}
      values: {replicas: 3, tier: {size: m}}
    - clusterSelector: {matchExpressions: [{key: region, operator: In, values: [eu, us]}]}
      values: {tier: {size: l}}
  resources:
    - apiVersion: v1
      kind: ConfigMap
      metadata: {name: app, namespace: apps}
      data:
        region: "{{ cluster.labels.region }}"
        greeting: "hello {{ cluster.name }} of {{ cluster.annotations.owner }}"
        replicas: "{{ values.replicas | string }}"
        size: "{{ values.tier.size }}"
        zone: "{{ cluster.values.zone | default('none') }}"
        literal: "{{ '{{' }} not a template }}"
    - apiVersion: apps/v1
      kind: Deployment
      metadata: {name: app, namespace: apps}
      spec: {replicas: "{{ values.replicas }}", paused: "{{ values.replicas > 2 }}"}
"#;

#[test]
fn each_cluster_gets_its_labels_values_and_the_customizations_that_match_it() {
    let s = syncset(REGIONAL);
    let eu = cluster("c1", "eu", ", values: {zone: eu-1a}");
    let out = render(&s.spec, &s.spec.resources, &eu).expect("renders");
    let data = &out[0].0["data"];
    assert_eq!(data["region"], "eu");
    assert_eq!(data["greeting"], "hello c1 of team-eu");
    assert_eq!(data["replicas"], "3", "`| string` keeps text");
    assert_eq!(data["size"], "l", "later customizations win, maps merge key by key");
    assert_eq!(data["zone"], "eu-1a");
    assert_eq!(data["literal"], "{{ not a template }}");
    assert_eq!(out[1].0["spec"]["replicas"], 3, "one expression keeps the value's type");
    assert_eq!(out[1].0["spec"]["paused"], true);

    let ap = cluster("c2", "ap", "");
    let out = render(&s.spec, &s.spec.resources, &ap).expect("renders");
    let data = &out[0].0["data"];
    assert_eq!(
        (&data["region"], &data["replicas"], &data["size"], &data["zone"]),
        (&"ap".into(), &"2".into(), &"s".into(), &"none".into())
    );
    assert_eq!(values_for(&s.spec, &ap.metadata.labels)["tier"]["name"], "web");
}

#[test]
fn rendering_is_deterministic_and_the_hash_follows_the_output() {
    let s = syncset(REGIONAL);
    let (a, b) = (cluster("c1", "eu", ""), cluster("c1", "us", ""));
    let first = render(&s.spec, &s.spec.resources, &a).expect("renders");
    assert_eq!(first, render(&s.spec, &s.spec.resources, &a).expect("renders"));
    let other = render(&s.spec, &s.spec.resources, &b).expect("renders");
    assert_eq!(rendered_hash(&first), rendered_hash(&first.clone()));
    assert_ne!(rendered_hash(&first), rendered_hash(&other));
    assert_eq!(rendered_hash(&first).len(), 12);
}

#[test]
fn a_missing_value_fails_naming_the_resource_the_field_the_line_and_the_value() {
    let s = syncset(
        "  resources:\n    - apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: app, namespace: apps}\n      data:\n        script: \"line one\\n{{ cluster.labels.tier }}\"\n",
    );
    let e = render(&s.spec, &s.spec.resources, &cluster("c1", "eu", "")).expect_err("no tier label");
    assert_eq!((e.field.as_str(), e.line), ("data.script", 2));
    assert!(e.message.contains("undefined value cluster.labels.tier"), "{e}");
    assert_eq!(e.to_string(), "template v1/ConfigMap apps/app data.script line 2: undefined value cluster.labels.tier");
}

#[test]
fn templates_are_refused_at_apply_when_they_break_a_rule() {
    let cm = |data: &str| {
        format!("  resources:\n    - apiVersion: v1\n      kind: ConfigMap\n      metadata: {{name: app, namespace: apps}}\n      data: {{k: {data}}}\n")
    };
    let e = refused(&cm(r#""{% for i in range(1000000000) %}x{% endfor %}""#));
    assert_eq!(e.field, "spec.resources[0].data.k");
    assert!(e.message.contains("statements"), "{e}");
    let e = refused(&cm(r#""{# a comment #} {{ cluster.name }} {% if x %}""#));
    assert!(e.message.contains("statements"), "a comment before an expression is refused too: {e}");
    let e = refused(&cm(r#""{{ 'x' * 100000000 }}""#));
    assert!(e.message.contains("`*` operator"), "{e}");
    let e = refused(&cm(r#""{{ cluster.name""#));
    assert!(e.message.contains("without"), "{e}");
    let e = refused(&cm(r#""{{ cluster.name + }}""#));
    assert!(e.message.starts_with("line 1:"), "{e}");
    let long = format!("\"{{{{ '{}' }}}}\"", "y".repeat(MAX_EXPRESSION_BYTES));
    assert!(refused(&cm(&long)).message.contains("longer than 512 bytes"));
    let e = refused("  resources:\n    - {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ cluster.name }}\", namespace: apps}}\n");
    assert_eq!(e.field, "spec.resources[0].metadata.name");
    assert!(e.message.contains("identity"), "{e}");
    let e = refused(&format!("  values: {{big: \"{}\"}}\n  resources: []\n", "z".repeat(MAX_VALUES_BYTES)));
    assert_eq!(e.field, "spec.values");
}

#[test]
fn values_and_customizations_need_templated() {
    let yaml = "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: app}\nspec: {clusterSelector: {}, values: {a: 1}}\n";
    let crate::ParseError::Invalid(v) = parse_documents(yaml).expect_err("refused") else { panic!() };
    assert_eq!(v.field, "spec.values");
}

#[test]
fn output_is_bounded_per_key() {
    // Each expression is within its limits; together they would expand far beyond the
    // key's budget.
    let big = "w".repeat(200 * 1024);
    let expr = format!("\"{{{{ {} }}}}\"", vec!["values.big"; 30].join(" ~ "));
    let s = syncset(&format!(
        "  values: {{big: {big}}}\n  resources:\n    - apiVersion: v1\n      kind: ConfigMap\n      metadata: {{name: app, namespace: apps}}\n      data: {{a: {expr}, b: {expr}}}\n"
    ));
    let e = render(&s.spec, &s.spec.resources, &cluster("c1", "eu", "")).expect_err("too big");
    assert!(e.message.contains("exceed 8388608 bytes (the limit)"), "{e}");
}

#[test]
fn filters_outside_the_set_are_unknown() {
    let s = syncset(
        "  resources:\n    - apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: app, namespace: apps}\n      data: {a: \"{{ cluster.name | replace('c', 'cccccccc') }}\"}\n",
    );
    let e = render(&s.spec, &s.spec.resources, &cluster("c1", "eu", "")).expect_err("no replace");
    assert!(e.message.contains("unknown filter"), "{e}");
}

#[test]
fn the_worked_example_renders_as_its_comments_say() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/templates.yaml")).expect("read");
    let docs = parse_documents(&text).expect("valid");
    let clusters: Vec<&Cluster> =
        docs.iter().filter_map(|d| if let Document::Cluster(c) = d { Some(c) } else { None }).collect();
    let Some(Document::SyncSet(web)) = docs.iter().find(|d| matches!(d, Document::SyncSet(_))) else {
        panic!("a SyncSet")
    };
    let got: Vec<(String, Value, Value, Value)> = clusters
        .iter()
        .map(|c| {
            let out = render(&web.spec, &web.spec.resources, c).expect("renders");
            let data = &out[1].0["data"];
            (
                c.metadata.name.clone(),
                data["owner"].clone(),
                data["logLevel"].clone(),
                out[2].0["spec"]["replicas"].clone(),
            )
        })
        .collect();
    let row = |n: &str, o: &str, l: &str, r: u64| (n.to_string(), Value::from(o), Value::from(l), Value::from(r));
    assert_eq!(
        got,
        [
            row("eu-west-1", "team-eu", "info", 3),
            row("eu-central-1", "platform", "info", 3),
            row("us-east-1", "team-us", "debug", 2)
        ]
    );
}

#[test]
fn a_number_beyond_every_integer_reads_back_from_the_stored_form_as_it_was() {
    // 53 digits: read as the nearest f64, which the store's JSON must give back exactly.
    let s = syncset(&format!("  values: {{replicas: {}}}\n  resources: []\n", "2".repeat(53)));
    let stored = serde_json::to_string(&s).expect("encodes");
    let back: crate::SyncSet = serde_json::from_str(&stored).expect("decodes");
    assert_eq!(back, s, "stored as {stored}");
}
