//! Notifiers: stored and listed as any object, each written one enqueueing its
//! delivery key, and deleted one enqueueing its key's removal; a consumer's cursor
//! (a notifier's) forgotten on request.

use super::*;
use crate::{ObjectFilter, PageRequest};
use fleetsync_model::{Notifier, NotifierSpec, WebhookTarget};

fn notifier(name: &str, url: &str) -> Document {
    let spec = NotifierSpec { webhook: Some(WebhookTarget { url: url.into() }), ..NotifierSpec::default() };
    Document::Notifier(Notifier { metadata: ObjectMeta::new(name), spec })
}

/// A Notifier is stored as written (its URL whole: redaction is for showing), listed
/// and paged; its key runs on each change to it (not when applied unchanged), and its
/// removal runs once it is deleted. A deleted consumer cursor starts again from none.
pub async fn notifiers_are_stored_and_run_as_keys(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let url = "https://hooks.example/x?token=s3cret";
    s.objects_apply(vec![notifier("ops", url), notifier("audit", "http://10.0.0.1/h")]).await.expect("apply");
    let ops = s.notifier_get("default", "ops").await.expect("get").expect("stored");
    assert_eq!((ops.spec.webhook.map(|w| w.url).as_deref(), ops.metadata.generation), (Some(url), 1));
    let names: Vec<_> =
        s.notifier_list(Some("default")).await.expect("list").into_iter().map(|n| n.metadata.name).collect();
    assert_eq!(names, ["audit", "ops"]);
    let filter = ObjectFilter { tenant: Some("default".into()) };
    let page = s.notifier_page(&filter, &PageRequest { limit: 1, after: None }).await.expect("page");
    assert_eq!(page.items.iter().map(|n| n.metadata.name.as_str()).collect::<Vec<_>>(), ["audit"]);
    assert!(s.notifier_get("other", "ops").await.expect("get").is_none());

    let mut keys: Vec<_> = claim(s.as_ref(), "w", 10).await;
    keys.sort_by(|a, b| a.key.cmp(&b.key));
    let want = [WorkKey::notifier("default", "audit"), WorkKey::notifier("default", "ops")];
    assert_eq!(keys.iter().map(|i| &i.key).collect::<Vec<_>>(), want.iter().collect::<Vec<_>>());
    assert!(keys.iter().all(|i| i.desired));
    for item in &keys {
        let done = RunOutcome::Applied { generation: item.generation, inventory: vec![], rendered: None };
        complete(s.as_ref(), item, done).await;
    }
    s.objects_apply(vec![notifier("ops", url)]).await.expect("unchanged");
    assert!(claim(s.as_ref(), "w", 10).await.is_empty(), "an unchanged notifier runs nothing");
    s.objects_apply(vec![notifier("ops", "https://hooks.example/y")]).await.expect("changed");
    let again = claim(s.as_ref(), "w", 10).await;
    assert_eq!((again.len(), &again[0].key, again[0].generation), (1, &want[1], 2));
    complete(s.as_ref(), &again[0], RunOutcome::Applied { generation: 2, inventory: vec![], rendered: None }).await;

    s.object_delete(Kind::Notifier, "default", "ops").await.expect("delete");
    assert!(s.notifier_get("default", "ops").await.expect("get").is_none());
    let removal = claim(s.as_ref(), "w", 10).await;
    assert_eq!((removal.len(), &removal[0].key, removal[0].desired), (1, &want[1], false));
    assert_eq!(complete(s.as_ref(), &removal[0], RunOutcome::Removed).await, CompleteOutcome::Removed);

    s.consumer_ack("notifier:default/ops", 5).await.expect("ack");
    s.consumer_delete("notifier:default/ops").await.expect("delete");
    assert_eq!(s.consumer_get("notifier:default/ops").await.expect("get"), None);
    s.consumer_delete("notifier:default/ops").await.expect("deleting none is fine");
    assert_eq!(s.consumer_ack("notifier:default/ops", 2).await.expect("ack"), 2, "starts again from none");
}
