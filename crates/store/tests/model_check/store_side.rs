//! The store side of the model check: one case run against a real `SqliteStore`,
//! compared with the model after every step, and the `work` rows it reads to do so.

use super::*;

/// One `work` row as stored, in the model's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RawRow {
    key: WorkKey,
    state: KeyState,
}

fn raw_rows(conn: &rusqlite::Connection) -> rusqlite::Result<(Vec<RawRow>, i64)> {
    let mut stmt = conn.prepare(
        "SELECT tenant, cluster, syncset, phase, run_at, want_seq, claimed_seq, fence, lease_expires_at, attempts,
                generation, observed_generation, last_error IS NOT NULL
         FROM work ORDER BY id",
    )?;
    let rows = stmt
        .query_map([], |r| {
            let phase: String = r.get(3)?;
            let phase = match phase.as_str() {
                "idle" => Db::Idle,
                "ready" => Db::Ready,
                "running" => Db::Running,
                "parked" => Db::Parked,
                other => panic!("unknown phase {other:?}"),
            };
            Ok(RawRow {
                key: WorkKey::new(r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?),
                state: KeyState {
                    phase,
                    run_at: r.get(4)?,
                    want_seq: r.get(5)?,
                    claimed_seq: r.get(6)?,
                    fence: r.get(7)?,
                    lease_expires_at: r.get(8)?,
                    attempts: r.get(9)?,
                    generation: r.get(10)?,
                    observed_generation: r.get(11)?,
                    last_error: r.get(12)?,
                },
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let fence = conn.query_row("SELECT v FROM meta WHERE k = 'fence'", [], |r| r.get(0))?;
    Ok((rows, fence))
}

fn store_err(ctx: &str, e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(format!("{ctx}: store error: {e}"))
}

/// Runs one case: the whole op sequence, checking after every step.
pub(super) async fn run_case(ops: Vec<Op>, cov: &mut Coverage) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(format!("tempdir: {e}")))?;
    let path = dir.path().join("fleetsync.db");
    let clock = Arc::new(ManualClock::new(Timestamp(T0)));
    let config = StoreConfig { clock: Some(clock.clone()), retry: retry_policy(), keys: None };
    let store = SqliteStore::open(&path, config).map_err(|e| TestCaseError::fail(format!("open: {e}")))?;
    let raw = rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| TestCaseError::fail(format!("raw connection: {e}")))?;

    let mut docs: Vec<_> = CLUSTERS.iter().map(|c| cluster(c, &[("env", "prod")])).collect();
    docs.extend(SYNCSETS.iter().map(|s| syncset(s, 1, "m0")));
    store.objects_apply(docs).await.map_err(|e| TestCaseError::fail(format!("setup: {e}")))?;

    let mut model = Model::new();
    let mut held: Vec<Vec<ClaimedItem>> = vec![Vec::new(); WORKERS];
    let mut marker = 0u64;
    // Every fence handed out for each key, to check they strictly increase per key.
    let mut last_fence: BTreeMap<WorkKey, i64> = BTreeMap::new();

    check_state(&store, &raw, &model, &held, "after setup").await?;

    for (step, op) in ops.iter().enumerate() {
        let ctx = format!("step {step} {op:?}");
        cov.steps += 1;
        match op {
            Op::Enqueue(s) => {
                marker += 1;
                let out = store
                    .objects_apply(vec![syncset(SYNCSETS[*s], 1, &format!("m{marker}"))])
                    .await
                    .map_err(|e| store_err(&ctx, e))?;
                let g = model.apply_syncset(*s);
                prop_assert_eq!(out.len(), 1, "{}", ctx);
                prop_assert_eq!(
                    (out[0].kind, out[0].generation, out[0].result, out[0].enqueued),
                    (Kind::SyncSet, g, "updated", 2),
                    "{}",
                    ctx
                );
            }
            Op::Claim { worker, limit } => {
                let owner = format!("w{worker}");
                let got =
                    store.work_claim(ClaimParams::new(owner, *limit, TTL)).await.map_err(|e| store_err(&ctx, e))?;
                let (expired, ready) = model.claimable();
                let n_exp = expired.len().min(*limit);
                let n_ready = ready.len().min(*limit - n_exp);
                cov.takeovers += n_exp as u64;
                let exp_at: Vec<_> = expired.iter().map(|&i| model.keys[i].lease_expires_at).collect();
                if exp_at.windows(2).any(|w| w[0] == w[1]) {
                    cov.expiry_ties += 1;
                }
                prop_assert_eq!(
                    got.len(),
                    n_exp + n_ready,
                    "{}: claimed count (expired {:?}, ready {:?})",
                    ctx,
                    expired,
                    ready
                );
                // The expired part: the same expiry times in order as the model's, each an
                // expired key, no key twice (ties in expiry may be broken any way).
                let mut order = Vec::with_capacity(got.len());
                for (j, item) in got.iter().enumerate() {
                    let i = model.index_of(&item.key);
                    prop_assert!(i.is_some(), "{}: unknown key {:?}", ctx, item.key);
                    let i = i.unwrap_or_default();
                    prop_assert!(!order.contains(&i), "{}: key {} claimed twice in one claim", ctx, item.key);
                    if j < n_exp {
                        prop_assert!(
                            expired.contains(&i),
                            "{}: item {} ({}) is not an expired lease; expected {:?}",
                            ctx,
                            j,
                            item.key,
                            expired
                        );
                        prop_assert_eq!(
                            model.keys[i].lease_expires_at,
                            model.keys[expired[j]].lease_expires_at,
                            "{}: item {} ({}) out of expiry order",
                            ctx,
                            j,
                            item.key
                        );
                    } else {
                        prop_assert_eq!(
                            i,
                            ready[j - n_exp],
                            "{}: item {} is {}, expected {}",
                            ctx,
                            j,
                            item.key,
                            model.names[ready[j - n_exp]]
                        );
                    }
                    order.push(i);
                }
                for (item, i) in got.iter().zip(order) {
                    let (key, fence, generation, attempt) = model.claim_one(i);
                    prop_assert_eq!(
                        (&item.key, item.fence.get(), item.generation, item.attempt),
                        (&key, fence, generation, attempt),
                        "{}: claimed item (key, fence, generation, attempt)",
                        ctx
                    );
                    prop_assert_eq!(
                        (item.desired, item.cluster_generation, item.apply_mode, item.inventory.len()),
                        (true, 1, ApplyMode::Sync, 0),
                        "{}: claimed item {}",
                        ctx,
                        item.key
                    );
                    if let Some(prev) = last_fence.insert(item.key.clone(), item.fence.get()) {
                        prop_assert!(
                            item.fence.get() > prev,
                            "{}: fence of {} did not increase ({} after {})",
                            ctx,
                            item.key,
                            item.fence,
                            prev
                        );
                    }
                }
                held[*worker].extend(got);
            }
            Op::Complete { worker, item, current, ran } => {
                if held[*worker].is_empty() {
                    continue;
                }
                let live: Vec<usize> = (0..held[*worker].len())
                    .filter(|&j| {
                        let it = &held[*worker][j];
                        model.index_of(&it.key).is_some_and(|i| {
                            model.keys[i].phase == Db::Running && model.keys[i].fence == it.fence.get()
                        })
                    })
                    .collect();
                let at = if *current && !live.is_empty() {
                    live[item.index(live.len())]
                } else {
                    item.index(held[*worker].len())
                };
                let it = held[*worker].remove(at);
                let outcome = match ran {
                    Ran::Applied => {
                        RunOutcome::Applied { generation: it.generation, inventory: vec![], rendered: None }
                    }
                    Ran::Failed => RunOutcome::Failed { error: format!("boom at step {step}") },
                    Ran::Waiting => RunOutcome::Waiting {
                        reason: format!("waiting at step {step}"),
                        after: Duration::from_millis(WAIT_MS as u64),
                    },
                };
                let c =
                    Completion { key: it.key.clone(), fence: it.fence, outcome: outcome.clone(), resources: vec![] };
                let got = store.work_complete(vec![c]).await.map_err(|e| store_err(&ctx, e))?;
                let i = model.index_of(&it.key).unwrap_or_default();
                if model.keys[i].phase == Db::Running && model.keys[i].fence == it.fence.get() && model.keys[i].dirty()
                {
                    cov.dirty_completions += 1;
                }
                let want = model.complete(i, it.fence.get(), &outcome);
                match want {
                    CompleteOutcome::Stale => cov.stale_completions += 1,
                    CompleteOutcome::Committed(Phase::Failed) => cov.failed_backoff += 1,
                    CompleteOutcome::Committed(Phase::Parked) => cov.parked += 1,
                    CompleteOutcome::Committed(Phase::Applied) => cov.applied += 1,
                    _ => {}
                }
                prop_assert_eq!(got, vec![want], "{}: completion of {} fence {}", ctx, it.key, it.fence);
            }
            Op::Renew(worker) => {
                let leases: Vec<(WorkKey, Fence)> = held[*worker].iter().map(|i| (i.key.clone(), i.fence)).collect();
                let got = store
                    .lease_renew(RenewParams { leases: leases.clone(), lease_ttl: TTL })
                    .await
                    .map_err(|e| store_err(&ctx, e))?;
                let want = model.renew(&leases);
                cov.lost_on_renew += want.len() as u64;
                cov.kept_on_renew += (leases.len() - want.len()) as u64;
                prop_assert_eq!(got, want, "{}: lost keys of {:?}", ctx, leases);
            }
            Op::Release { worker, item } => {
                if held[*worker].is_empty() {
                    continue;
                }
                let at = item.index(held[*worker].len());
                let it = held[*worker].remove(at);
                store.work_release(&it.key, it.fence).await.map_err(|e| store_err(&ctx, e))?;
                let i = model.index_of(&it.key).unwrap_or_default();
                if model.keys[i].phase == Db::Running && model.keys[i].fence == it.fence.get() {
                    cov.releases_honoured += 1;
                }
                model.release(i, it.fence.get());
            }
            Op::Advance(secs) => {
                clock.advance(Duration::from_secs(*secs));
                model.now += i64::try_from(*secs).unwrap_or_default() * 1_000;
            }
            Op::Resync => {
                let got = store.work_resync().await.map_err(|e| store_err(&ctx, e))?;
                let want = model.resync();
                cov.resynced += want;
                prop_assert_eq!(got, want, "{}: resynced count", ctx);
            }
            Op::Retry(k) => {
                store.work_retry(&model.names[*k].clone()).await.map_err(|e| store_err(&ctx, e))?;
                model.enqueue(*k, None);
            }
        }
        check_state(&store, &raw, &model, &held, &ctx).await?;
    }
    Ok(())
}

/// Compares everything observable with the model, and checks exclusivity.
async fn check_state(
    store: &SqliteStore,
    raw: &rusqlite::Connection,
    model: &Model,
    held: &[Vec<ClaimedItem>],
    ctx: &str,
) -> Result<(), TestCaseError> {
    let now = model.now;

    // Status of every key, as the API shows it.
    let statuses = store.status_list(&StatusFilter::default()).await.map_err(|e| store_err(ctx, e))?;
    prop_assert_eq!(statuses.len(), model.keys.len(), "{}: number of keys", ctx);
    for st in &statuses {
        let i = model.index_of(&st.key);
        prop_assert!(i.is_some(), "{}: unknown key {:?} in status", ctx, st.key);
        let k = &model.keys[i.unwrap_or_default()];
        let next = (k.phase == Db::Ready && k.run_at > now).then_some(Timestamp(k.run_at));
        prop_assert_eq!(
            (
                st.phase,
                st.attempts,
                st.generation,
                st.observed_generation,
                st.desired,
                st.last_error.is_some(),
                st.next_attempt_at
            ),
            (k.status_phase(), k.attempts, k.generation, k.observed_generation, true, k.last_error, next),
            "{}: status of {} (phase, attempts, generation, observed, desired, has error, next attempt); model {:?}",
            ctx,
            st.key,
            k
        );
    }

    // The raw rows and the fence counter.
    let (rows, fence) = raw_rows(raw).map_err(|e| store_err(ctx, e))?;
    prop_assert_eq!(fence, model.fence, "{}: fence counter", ctx);
    let want: Vec<RawRow> = model
        .names
        .iter()
        .zip(&model.keys)
        .map(|(key, state)| RawRow { key: key.clone(), state: state.clone() })
        .collect();
    prop_assert_eq!(&rows, &want, "{}: work rows (store left, model right)", ctx);

    // Scheduling and statistics.
    let next = store.work_next_ready_at(None).await.map_err(|e| store_err(ctx, e))?;
    prop_assert_eq!(next.map(|t| t.0), model.next_ready_at(), "{}: next ready at", ctx);
    let stats = store.queue_stats().await.map_err(|e| store_err(ctx, e))?;
    let mut by_phase: BTreeMap<Phase, u64> = Phase::ALL.iter().map(|p| (*p, 0)).collect();
    for k in &model.keys {
        *by_phase.entry(k.status_phase()).or_default() += 1;
    }
    prop_assert_eq!(&stats.by_phase, &by_phase, "{}: queue stats by phase", ctx);
    let oldest = model.keys.iter().filter(|k| k.phase == Db::Ready && k.run_at <= now).map(|k| k.run_at).min();
    let age = oldest.map(|t| Duration::from_millis(u64::try_from(now - t).unwrap_or(0))).unwrap_or_default();
    prop_assert_eq!(stats.oldest_ready_age, age, "{}: oldest ready age", ctx);

    // Exclusivity, from the store's own rows: at most one held item per key is a valid
    // lease (current fence, running, not expired).
    for row in &rows {
        let holders: Vec<(usize, i64)> = held
            .iter()
            .enumerate()
            .flat_map(|(w, items)| items.iter().map(move |it| (w, it)))
            .filter(|(_, it)| it.key == row.key && row.state.lease_valid(now, it.fence.get()))
            .map(|(w, it)| (w, it.fence.get()))
            .collect();
        prop_assert!(
            holders.len() <= 1,
            "{}: {} has several valid holders (worker, fence): {:?}",
            ctx,
            row.key,
            holders
        );
        // A running key always carries a lease (else it could never be taken over).
        if row.state.phase == Db::Running {
            prop_assert!(row.state.lease_expires_at.is_some(), "{}: running key {} without a lease", ctx, row.key);
        }
    }
    Ok(())
}
