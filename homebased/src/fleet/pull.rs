//! Events back to the origin (SPEC section 13). The authority keeps a remote job's events
//! and delivers them to no sink of its own; the origin pulls them, one task per authority it
//! has routed live jobs to, with a long poll (`GET /v1/fleet/events`, answered as soon as an
//! event exists), and stores each answer with its cursor in one transaction. The origin's
//! delivery loop then delivers them like local events. An authority that is down only
//! delays delivery: the pull backs off and asks again from the stored cursor.

use super::Fleet;
use crate::core::CoreHandle;
use homebased_shared::error::ErrorCode;
use homebased_shared::ids::MachineId;
use std::collections::HashMap;
use std::time::Duration;

/// How long the authority may hold a pull with nothing to answer (SPEC: `wait=25s`).
pub const WAIT: Duration = Duration::from_secs(25);
/// How often the set of authorities to pull from is read again (besides wakes).
const RESCAN: Duration = Duration::from_secs(1);
/// After a failed pull: 1 s doubling up to this.
const BACKOFF_MAX: Duration = Duration::from_secs(8);

/// The wait after the `failures`-th failed pull in a row.
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(8);
    (Duration::from_secs(1) * 2u32.pow(doublings)).min(BACKOFF_MAX)
}

/// Runs until aborted: keeps one pull task per authority with live routes.
pub async fn pull_forever(fleet: Fleet, core: CoreHandle) {
    if !fleet.enabled() {
        return;
    }
    let mut pulls: HashMap<MachineId, tokio::task::JoinHandle<()>> = HashMap::new();
    loop {
        pulls.retain(|_, task| !task.is_finished());
        match core.fleet_live_authorities().await {
            Ok(live) => {
                for authority in live {
                    pulls.entry(authority).or_insert_with(|| {
                        tokio::spawn(pull_from(fleet.clone(), core.clone(), authority))
                    });
                }
            }
            Err(e) if e.code == ErrorCode::DaemonUnavailable => return,
            Err(e) => tracing::warn!(error = %e, "cannot read the Fleet routes"),
        }
        tokio::select! {
            _ = fleet.routes_changed() => {}
            _ = tokio::time::sleep(RESCAN) => {}
        }
    }
}

/// Pulls from one authority until none of its routes is live. Each pull's cursor tells the
/// authority that everything up to it is stored here (it may then let those jobs leave its
/// history), so once the last live route ended, one more pull without waiting says so for
/// the events just stored; if it fails, the next pull to that authority says it instead.
async fn pull_from(fleet: Fleet, core: CoreHandle, authority: MachineId) {
    let me = fleet.identity().machine;
    let mut failures = 0u32;
    let mut wait = WAIT;
    loop {
        let after = match core.fleet_cursor(authority).await {
            Ok(after) => after,
            Err(e) if e.code == ErrorCode::DaemonUnavailable => return,
            Err(e) => {
                tracing::warn!(%authority, error = %e, "cannot read the Fleet cursor");
                tokio::time::sleep(backoff(1)).await;
                continue;
            }
        };
        let answer = match fleet.peer(&authority.to_string()).await {
            Ok(Some((client, _))) => client.fleet_events(me, after, wait).await,
            // The authority is this machine: nothing to pull.
            Ok(None) => return,
            Err(e) => Err(e),
        };
        match answer {
            Ok(answer) => {
                failures = 0;
                if !answer.events.is_empty() {
                    let pulled = answer
                        .events
                        .into_iter()
                        .map(|e| (e.cursor, e.event))
                        .collect();
                    if let Err(e) = core.fleet_store_pulled(authority, pulled).await {
                        // Not stored: the cursor did not move, the same events come again.
                        tracing::warn!(%authority, error = %e, "cannot store pulled events");
                        tokio::time::sleep(backoff(1)).await;
                    }
                }
                match core.fleet_live_authorities().await {
                    // The last pull was the acknowledgement.
                    Ok(live) if !live.contains(&authority) && wait.is_zero() => return,
                    Ok(live) if !live.contains(&authority) => wait = Duration::ZERO,
                    Err(e) if e.code == ErrorCode::DaemonUnavailable => return,
                    _ => wait = WAIT,
                }
            }
            Err(e) => {
                if e.code == ErrorCode::MachineUnavailable {
                    fleet.unreachable(&authority.to_string());
                }
                if wait.is_zero() {
                    return; // only the acknowledgement was left to send
                }
                failures += 1;
                tracing::debug!(%authority, error = %e.message, failures, "Fleet pull failed");
                tokio::time::sleep(backoff(failures)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_pull_backs_off_from_one_second_to_a_bound() {
        let secs: Vec<u64> = (1..=6).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 8, 8]);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }
}
