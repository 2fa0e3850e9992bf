//! Proposing a write and proposing it again while that can still make it whole. A
//! write whose measurements live in several data groups is one entry per group,
//! proposed in parallel, each to its group's leader (this node's Raft instance of the
//! group, or a member of a group held elsewhere, which forwards it); a cluster with one
//! data group proposes one entry, the same way.
//!
//! Such a write is not atomic, so a part that fails while another commits would leave
//! the client a 504 ("part written, part not"), and a group electing a new leader (a
//! kill, a handover, a move) refuses parts for a second or two. So failed parts are
//! proposed again until the write's deadline (`http.write_timeout_ms` from the start
//! of the proposal) when another part committed or some outcome is unknown: a part
//! refused before anything was appended (no leader, the group unavailable) always,
//! since it wrote nothing; a part whose outcome is unknown only when the write carries
//! an id (`Idempotency-Key`), since its group then stores a retry once. Only a part
//! still not written at the deadline costs the client a 504. A write refused whole,
//! nothing appended, is answered 503 at once: nothing is half-written and the client
//! resends.

use std::time::{Duration, Instant};

use quiver_raft::{CommandResult, LeaderRequest, WriteCommand, WriteError};

use super::error::ApiError;
use super::write::written;
use super::AppState;
use crate::groups::Route;

/// First pause before a failed part is proposed again; doubled up to
/// [`RETRY_PAUSE_MAX`]: an election takes one to two election timeouts.
const RETRY_PAUSE_FIRST: Duration = Duration::from_millis(50);
/// Longest pause between two proposals of a part.
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(400);

/// One part of a write: its group, the measurements it holds, and the command.
struct Part {
    group: u32,
    names: Vec<String>,
    command: WriteCommand,
    target: Target,
}

/// Where a part of a write is proposed.
#[allow(clippy::large_enum_variant)] // one per part of a write, moved once
enum Target {
    /// Through this node's Raft instance of the group.
    Local(quiver_raft::RaftNode),
    /// Through a member of a group other nodes hold.
    Remote(std::sync::Arc<crate::groups::RemoteGroup>),
}

impl Part {
    async fn propose(&self) -> Result<CommandResult, WriteError> {
        match &self.target {
            Target::Local(node) => node.write(self.command.clone()).await,
            // A member of the group forwards it to the group's leader.
            Target::Remote(remote) => {
                remote
                    .commit(LeaderRequest::Write(self.command.clone()))
                    .await
            }
        }
    }
}

/// Whether a part that failed with `e` may be proposed again: nothing was written, or
/// the group stores a retry of the same write id once.
pub(super) fn may_propose_again(e: &WriteError, has_write_id: bool) -> bool {
    match e {
        WriteError::NotLeader { .. } | WriteError::Unavailable(_) => true,
        WriteError::Unknown(_) => has_write_id,
    }
}

/// Whether failed parts are proposed again: when one may be and the write is not
/// simply refused. A write no part of which was written, refused before anything was
/// appended, is answered 503 at once (the proposal already waited
/// `raft.leader_wait_ms` for a leader); one with a part written, or with a part whose
/// outcome is unknown and a write id to make its retry safe, is worth the wait: its
/// alternative is a 504.
pub(super) fn worth_proposing_again(
    outcomes: &[Result<CommandResult, WriteError>],
    has_write_id: bool,
) -> bool {
    let retryable = outcomes
        .iter()
        .any(|o| matches!(o, Err(e) if may_propose_again(e, has_write_id)));
    let any_written = outcomes.iter().any(Result::is_ok);
    let any_unknown = outcomes
        .iter()
        .any(|o| matches!(o, Err(WriteError::Unknown(_))));
    retryable && (any_written || any_unknown)
}

/// Proposes `command`'s parts, one per data group, and answers as [`combine_parts`]
/// says once each is written or the deadline passed.
pub(super) async fn propose_parts(
    app: &AppState,
    command: WriteCommand,
    deadline: Instant,
) -> Result<(), ApiError> {
    let has_write_id = command.write_id.is_some();
    if !app.groups.is_sharded() {
        let part = Part {
            group: quiver_raft::FIRST_GROUP,
            names: command
                .tables
                .iter()
                .map(|t| t.measurement.clone())
                .collect(),
            command,
            target: Target::Local(app.node.clone()),
        };
        return propose_all(vec![part], has_write_id, deadline).await;
    }
    let WriteCommand {
        database,
        tables,
        new_database_retention_ns,
        write_id,
        ..
    } = command;
    let parts: Vec<Part> = app
        .groups
        .partition(&database, tables, |t| &t.measurement)
        .into_iter()
        .map(|(route, tables)| Part {
            group: route.id(),
            names: tables.iter().map(|t| t.measurement.clone()).collect(),
            command: WriteCommand {
                database: database.clone(),
                tables,
                new_database_retention_ns,
                proposal: 0,
                // Each group remembers the ids of its own parts.
                write_id: write_id.clone(),
            },
            target: match route {
                Route::Local(group) => Target::Local(group.node.clone()),
                Route::Remote(remote) => Target::Remote(remote),
            },
        })
        .collect();
    propose_all(parts, has_write_id, deadline).await
}

/// Proposes every part once, then again those that may be while that can still make
/// the write whole (see [`worth_proposing_again`]), and answers as [`combine_parts`]
/// says.
async fn propose_all(
    parts: Vec<Part>,
    has_write_id: bool,
    deadline: Instant,
) -> Result<(), ApiError> {
    let mut outcomes: Vec<Result<CommandResult, WriteError>> =
        futures::future::join_all(parts.iter().map(Part::propose)).await;
    if worth_proposing_again(&outcomes, has_write_id) {
        let again = parts
            .iter()
            .zip(outcomes.iter_mut())
            .filter_map(|(part, outcome)| {
                let retry = matches!(outcome, Err(e) if may_propose_again(e, has_write_id));
                retry.then(|| propose_until(part, outcome, deadline))
            });
        futures::future::join_all(again).await;
    }
    combine_parts(
        parts
            .into_iter()
            .zip(outcomes)
            .map(|(part, outcome)| (part.group, part.names, written(outcome)))
            .collect(),
    )
}

/// Proposes `part` again, pausing between tries, until it is written, fails in a way
/// that may not be retried, or `deadline` passes; leaves the last outcome in `outcome`.
async fn propose_until(
    part: &Part,
    outcome: &mut Result<CommandResult, WriteError>,
    deadline: Instant,
) {
    let has_write_id = part.command.write_id.is_some();
    let mut pause = RETRY_PAUSE_FIRST;
    loop {
        let Err(e) = &*outcome else { return };
        if !may_propose_again(e, has_write_id) {
            return;
        }
        let now = Instant::now();
        if now + pause >= deadline {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_PAUSE_MAX);
        metrics::counter!("quiver_write_parts_retried_total").increment(1);
        let left = deadline.saturating_duration_since(Instant::now());
        *outcome = match tokio::time::timeout(left, part.propose()).await {
            Ok(result) => result,
            // Cut off mid-proposal: it may still commit.
            Err(_) => Err(WriteError::Unknown(format!(
                "group {}: the write's deadline passed while its part was proposed again",
                part.group
            ))),
        };
        if outcome.is_ok() {
            metrics::counter!("quiver_write_parts_written_on_retry_total").increment(1);
        }
    }
}

/// The answer to a write proposed in parts, one per data group: 204 only when every
/// part is durable; when none is, the first part's refusal (each says whether
/// nothing was written); when some are and others are not, 504 naming which
/// measurements were written and which were not, since a retry of the whole request
/// would write the written parts again.
fn combine_parts(parts: Vec<(u32, Vec<String>, Result<(), ApiError>)>) -> Result<(), ApiError> {
    let failed = parts.iter().filter(|(_, _, r)| r.is_err()).count();
    if failed == 0 {
        return Ok(());
    }
    if failed == parts.len() {
        let mut errors = parts.into_iter().filter_map(|(_, _, r)| r.err());
        return Err(errors
            .next()
            .unwrap_or_else(|| ApiError::internal("no part answered")));
    }
    let mut done = Vec::new();
    let mut not_done = Vec::new();
    for (group, names, result) in parts {
        match result {
            Ok(()) => done.push(format!("{} (group {group})", names.join(", "))),
            Err(e) => not_done.push(format!(
                "{} (group {group}: {})",
                names.join(", "),
                e.message
            )),
        }
    }
    metrics::counter!("quiver_writes_partly_committed_total").increment(1);
    Err(ApiError::with_status(
        axum::http::StatusCode::GATEWAY_TIMEOUT,
        format!(
            "part of this write was committed and part was not: written: {}; not written: {}. \
             Resend only the rows of the measurements not written, or the whole request \
             with the same Idempotency-Key",
            done.join("; "),
            not_done.join("; ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::write::write_error;
    use super::*;

    #[test]
    fn refusals_are_proposed_again_and_unknown_outcomes_only_with_a_write_id() {
        let refused = [
            WriteError::NotLeader { leader: None },
            WriteError::Unavailable("no member reachable".into()),
        ];
        for e in &refused {
            assert!(may_propose_again(e, false), "{e:?}");
            assert!(may_propose_again(e, true), "{e:?}");
        }
        let unknown = WriteError::Unknown("timed out".into());
        assert!(!may_propose_again(&unknown, false));
        assert!(may_propose_again(&unknown, true));
    }

    #[test]
    fn a_write_is_proposed_again_when_that_can_still_spare_a_504() {
        let written = || Ok(CommandResult::Written { rows: 1 });
        let refused = || Err(WriteError::NotLeader { leader: None });
        let unknown = || Err(WriteError::Unknown("leader gone".into()));
        // Refused whole: 503 at once.
        assert!(!worth_proposing_again(&[refused(), refused()], true));
        // One part in, one refused: the refused one again, id or not.
        assert!(worth_proposing_again(&[written(), refused()], false));
        // Outcome unknown: again only with an id that makes the retry safe.
        assert!(worth_proposing_again(&[unknown()], true));
        assert!(!worth_proposing_again(&[unknown()], false));
        assert!(worth_proposing_again(&[unknown(), refused()], false));
        // Nothing failed, nothing to do.
        assert!(!worth_proposing_again(&[written(), written()], true));
    }

    #[test]
    fn a_write_half_committed_names_both_halves_and_is_504() {
        let answer = combine_parts(vec![
            (1, vec!["cpu".into()], Ok(())),
            (
                2,
                vec!["mem".into()],
                Err(write_error(WriteError::NotLeader { leader: None })),
            ),
        ]);
        let e = answer.expect_err("half written");
        assert_eq!(e.status, axum::http::StatusCode::GATEWAY_TIMEOUT);
        assert!(
            e.message.contains("written: cpu (group 1)"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("not written: mem (group 2"),
            "{}",
            e.message
        );
        // Nothing written: the first refusal, a 503 the client may resend.
        let none = combine_parts(vec![(
            1,
            vec!["cpu".into()],
            Err(write_error(WriteError::NotLeader { leader: None })),
        )]);
        assert_eq!(
            none.expect_err("refused").status,
            axum::http::StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
