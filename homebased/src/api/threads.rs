//! `GET /v1/threads/{thread}/events?after=&wait=` (socket only): a thread's events as the
//! daemon's store recorded them, whatever the sink, after an opaque cursor, held open until
//! one exists. The MCP tool `events_wait` and `events --thread T --follow` read through it,
//! so following a thread never depends on the inbox file being the sink.

use super::ErrorResponse;
use super::{json, ApiResponse, AppState};
use axum::extract::{Path, Query, State};
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::ids::ThreadId;
use homebased_shared::wire::ThreadEvents;
use serde::Deserialize;
use serde_json::json as object;
use std::time::Duration;

/// The longest a read may ask to be held (SPEC 15: `events_wait` waits at most 5 minutes).
pub const MAX_WAIT: Duration = Duration::from_secs(5 * 60);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    after: Option<String>,
    wait: Option<String>,
}

/// The cursor a reader passed back: absent, from the thread's first event. It is the text of
/// an event's id (never given twice: `schema_v17.sql`), but only ever one this daemon
/// answered; anything else is refused, not guessed.
pub fn parse_cursor(after: Option<&str>) -> ApiResult<u64> {
    match after {
        None | Some("") => Ok(0),
        Some(text) => text
            .parse::<u64>()
            .ok()
            .filter(|_| text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::Usage,
                    format!(
                        "after: {text:?} is not a cursor this daemon answered; pass the \
                         `cursor` of an earlier answer, or nothing to read from the start"
                    ),
                )
                .with_input(object!({ "after": text }))
            }),
    }
}

/// How long to hold the read: absent, not at all; longer than [`MAX_WAIT`], that long.
pub fn parse_wait(wait: Option<&str>) -> ApiResult<Duration> {
    match wait {
        None => Ok(Duration::ZERO),
        Some(text) => humantime::parse_duration(text)
            .map(|d| d.min(MAX_WAIT))
            .map_err(|e| {
                ApiError::new(ErrorCode::Usage, format!("wait={text:?}: {e}"))
                    .with_input(object!({ "wait": text }))
            }),
    }
}

pub(super) async fn events(
    State(s): State<AppState>,
    Path(thread): Path<String>,
    q: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResponse {
    let Query(q) = q.map_err(|e| ErrorResponse(ApiError::new(ErrorCode::Usage, e.body_text())))?;
    let thread: ThreadId = thread.parse().map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidQueueInput,
            format!("{thread:?} is not a full thread UUID"),
        )
        .with_input(object!({ "thread": thread }))
    })?;
    let after = parse_cursor(q.after.as_deref())?;
    let wait = parse_wait(q.wait.as_deref())?;
    let wake = s.core.fleet_wake().await?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // Armed before the read, so an event appended between the two still wakes it.
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let found = s.core.thread_events(thread, after).await?;
        if !found.is_empty() || tokio::time::Instant::now() >= deadline {
            let cursor = found.last().map_or(after, |(n, _)| *n);
            return json(ThreadEvents {
                events: found.into_iter().map(|(_, event)| event).collect(),
                cursor: cursor.to_string(),
            });
        }
        tokio::select! {
            _ = &mut woken => {}
            _ = tokio::time::sleep_until(deadline) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_only_what_the_daemon_answered_and_a_wait_is_bounded() {
        assert_eq!(parse_cursor(None).unwrap(), 0);
        assert_eq!(parse_cursor(Some("")).unwrap(), 0);
        assert_eq!(parse_cursor(Some("42")).unwrap(), 42);
        for bad in ["-1", "+3", "4x", "1e3", " 7"] {
            let e = parse_cursor(Some(bad)).unwrap_err();
            assert_eq!(e.code, ErrorCode::Usage, "{bad}");
            assert_eq!(e.input["after"], bad);
        }
        assert_eq!(parse_wait(None).unwrap(), Duration::ZERO);
        assert_eq!(parse_wait(Some("25s")).unwrap(), Duration::from_secs(25));
        assert_eq!(parse_wait(Some("1h")).unwrap(), MAX_WAIT);
        assert_eq!(parse_wait(Some("soon")).unwrap_err().code, ErrorCode::Usage);
    }
}
