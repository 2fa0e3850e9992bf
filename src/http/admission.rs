//! Whether a write may come in, decided before anything of it is proposed: the token,
//! the node's health, writes in flight, buffer memory, free disk, and the write path's
//! byte budget. Every refusal is 429 or 503 with `Retry-After` (nothing was written),
//! and reaches the client as a status: the body it is still sending is read and
//! discarded first, so the server never closes a connection under a client mid-send.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::body::{declared_length, discard_body, expects_continue};
use super::error::ApiError;
use super::AppState;
use crate::auth::Permission;

/// Seconds a client is told to wait when the node is overloaded.
pub const RETRY_AFTER_S: u32 = 1;

/// The write path's memory ceiling (`http.write_bytes_in_flight_max`): every write in
/// flight holds a charge for its body as sent, inflated, decoded into Arrow and encoded
/// for the log, on this node and on the leader it is forwarded to.
#[derive(Clone)]
pub struct WriteBudget {
    kib: Arc<Semaphore>,
    kib_max: u32,
}

/// Bytes one write holds against the [`WriteBudget`]; returned when dropped.
#[derive(Default)]
pub struct Charge {
    permit: Option<OwnedSemaphorePermit>,
}

impl Charge {
    /// KiB held.
    pub fn kib(&self) -> u32 {
        self.permit.as_ref().map_or(0, |p| p.num_permits() as u32)
    }
}

/// Why a charge was not granted.
#[derive(Debug, PartialEq, Eq)]
pub enum ChargeRefused {
    /// The budget is taken by other writes now; retry later.
    Busy,
    /// This write alone needs more than the whole budget.
    TooLarge {
        /// What the write would hold in all.
        bytes: u64,
        /// The budget.
        bytes_max: u64,
    },
}

impl WriteBudget {
    /// A budget of `bytes_max` (rounded down to whole KiB, at least 1 KiB).
    pub fn new(bytes_max: usize) -> WriteBudget {
        let kib_max = (bytes_max / 1024).clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        WriteBudget {
            kib: Arc::new(Semaphore::new(kib_max)),
            kib_max: kib_max as u32,
        }
    }

    /// Adds `bytes` to `charge` if the budget has room now; never waits.
    pub fn try_charge(&self, charge: &mut Charge, bytes: usize) -> Result<(), ChargeRefused> {
        let kib = bytes.div_ceil(1024).max(1);
        let total = kib as u64 + u64::from(charge.kib());
        if total > u64::from(self.kib_max) {
            return Err(ChargeRefused::TooLarge {
                bytes: total * 1024,
                bytes_max: u64::from(self.kib_max) * 1024,
            });
        }
        let permit = self
            .kib
            .clone()
            .try_acquire_many_owned(kib as u32)
            .map_err(|_| ChargeRefused::Busy)?;
        match &mut charge.permit {
            Some(held) => held.merge(permit),
            None => charge.permit = Some(permit),
        }
        Ok(())
    }

    /// Takes `bytes` for as long as the caller wants, never waiting: what a decoder
    /// reserves as it builds (see [`quiver_storage::DecodeMemory`]).
    fn reserve_detached(&self, bytes: usize) -> Result<(), ChargeRefused> {
        let kib = bytes.div_ceil(1024).max(1);
        if kib as u64 > u64::from(self.kib_max) {
            return Err(ChargeRefused::TooLarge {
                bytes: kib as u64 * 1024,
                bytes_max: u64::from(self.kib_max) * 1024,
            });
        }
        self.kib
            .try_acquire_many(kib as u32)
            .map(tokio::sync::SemaphorePermit::forget)
            .map_err(|_| ChargeRefused::Busy)
    }

    /// Bytes of the budget in use now.
    pub fn bytes_in_use(&self) -> u64 {
        u64::from(self.kib_max).saturating_sub(self.kib.available_permits() as u64) * 1024
    }
}

impl quiver_storage::DecodeMemory for WriteBudget {
    fn reserve(&self, bytes: usize) -> Result<(), quiver_storage::DecodeMemoryRefusal> {
        self.reserve_detached(bytes)
            .map_err(|refused| match refused {
                ChargeRefused::Busy => quiver_storage::DecodeMemoryRefusal::Busy,
                ChargeRefused::TooLarge { bytes_max, .. } => {
                    quiver_storage::DecodeMemoryRefusal::TooLarge {
                        bytes_max: bytes_max as usize,
                    }
                }
            })
    }

    fn release(&self, bytes: usize) {
        if bytes > 0 {
            self.kib.add_permits(bytes.div_ceil(1024).max(1));
        }
    }
}

/// The refusal a [`ChargeRefused`] becomes.
pub fn charge_error(refused: ChargeRefused) -> ApiError {
    match refused {
        ChargeRefused::Busy => {
            metrics::counter!("quiver_writes_refused_total", "reason" => "bytes_in_flight")
                .increment(1);
            ApiError::overloaded(
                StatusCode::TOO_MANY_REQUESTS,
                "write memory budget (http.write_bytes_in_flight_max) is in use; retry later",
                RETRY_AFTER_S,
            )
        }
        ChargeRefused::TooLarge { bytes, bytes_max } => {
            metrics::counter!("quiver_writes_refused_total", "reason" => "too_large").increment(1);
            ApiError::too_large(format!(
                "this write needs {bytes} bytes in flight, more than http.write_bytes_in_flight_max ({bytes_max}); split it"
            ))
        }
    }
}

/// Free space of one volume, read at most every [`FREE_SPACE_REFRESH_MS`].
pub struct VolumeWatch {
    /// The setting that names the watermark, for messages.
    pub setting: &'static str,
    dir: std::path::PathBuf,
    free_bytes_min: u64,
    free_bytes: AtomicU64,
    read_at_ms: AtomicU64,
    epoch: Instant,
}

/// How stale a free-space reading may be.
const FREE_SPACE_REFRESH_MS: u64 = 250;

impl VolumeWatch {
    /// Watches the volume holding `dir`; below `free_bytes_min`, writes are refused.
    pub fn new(setting: &'static str, dir: std::path::PathBuf, free_bytes_min: u64) -> Self {
        VolumeWatch {
            setting,
            dir,
            free_bytes_min,
            free_bytes: AtomicU64::new(u64::MAX),
            read_at_ms: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
        }
    }

    /// Free bytes now (cached briefly); `u64::MAX` when the volume cannot be read.
    pub fn free_bytes(&self) -> u64 {
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        let read_at = self.read_at_ms.load(Ordering::Relaxed);
        if read_at == u64::MAX || now_ms.saturating_sub(read_at) >= FREE_SPACE_REFRESH_MS {
            let free = match fs2::available_space(&self.dir) {
                Ok(free) => free,
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "cannot read free space");
                    u64::MAX
                }
            };
            self.free_bytes.store(free, Ordering::Relaxed);
            self.read_at_ms.store(now_ms, Ordering::Relaxed);
        }
        self.free_bytes.load(Ordering::Relaxed)
    }

    /// Why writes must wait for this volume, if they must.
    pub fn low(&self) -> Option<String> {
        let free = self.free_bytes();
        (free < self.free_bytes_min).then(|| {
            format!(
                "{} has {free} bytes free, below {} ({} bytes); writes resume when space is freed",
                self.dir.display(),
                self.setting,
                self.free_bytes_min
            )
        })
    }
}

/// A write let in: what it holds until it is answered.
pub struct Admitted {
    /// Its share of the write budget; grows as the body is read and decoded.
    pub charge: Charge,
    _slot: OwnedSemaphorePermit,
}

/// Checks everything that can refuse a write before its body is used. On a refusal the
/// body is drained first (unless the client waits for `100 Continue` and so has not
/// sent it), so the status reaches the client.
pub async fn admit(
    app: &AppState,
    database: &str,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
    body: &mut Option<Body>,
) -> Result<Admitted, ApiError> {
    match check(app, database, headers, params) {
        Ok(admitted) => Ok(admitted),
        Err(refusal) => {
            if let Some(body) = body.take() {
                if !expects_continue(headers) {
                    let deadline =
                        Instant::now() + Duration::from_millis(app.config.http.body_timeout_ms);
                    discard_body(body, app.config.http.body_bytes_max, deadline).await;
                }
            }
            Err(refusal)
        }
    }
}

fn check(
    app: &AppState,
    database: &str,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
) -> Result<Admitted, ApiError> {
    app.auth
        .check_request(headers, params, Permission::Write)?
        .database(database)?;
    if let Some(reason) = app.node.fatal() {
        return Err(refused(
            "failing",
            StatusCode::SERVICE_UNAVAILABLE,
            format!("this node is stopping: {reason}"),
        ));
    }
    let slot = app.write_permits.clone().try_acquire_owned().map_err(|_| {
        refused(
            "in_flight",
            StatusCode::TOO_MANY_REQUESTS,
            "too many writes in flight (http.writes_in_flight_max); retry later".into(),
        )
    })?;
    if let Some((reason, message)) = cannot_take_rows(app) {
        return Err(refused(reason, StatusCode::SERVICE_UNAVAILABLE, message));
    }
    let mut charge = Charge::default();
    if let Some(declared) = declared_length(headers) {
        app.write_budget
            .try_charge(
                &mut charge,
                declared.min(app.config.http.body_bytes_max as u64) as usize,
            )
            .map_err(charge_error)?;
    }
    Ok(Admitted {
        charge,
        _slot: slot,
    })
}

/// Why this node cannot take more rows into its log and buffers now (buffers full, a
/// volume under its watermark), as a metric label and a message. Checked for a write
/// sent here, for a write a follower forwards here to lead, and for entries a leader
/// sends here to follow: every path into the log, so no node keeps appending until its
/// disk is full.
pub fn cannot_take_rows(app: &AppState) -> Option<(&'static str, String)> {
    // Each data group has its share of the buffer memory; one that is full refuses.
    for group in app.groups.holding_rows() {
        if group.storage.is_over_memory_limit() {
            let message = match group.storage.flush_failing(std::time::Duration::ZERO) {
                Some(why) => format!("buffers are full because {why}; retry later"),
                None => "buffers are full while flushes catch up; retry later".into(),
            };
            return Some(("memory", message));
        }
    }
    for volume in [&app.wal_volume, &app.data_volume] {
        if let Some(reason) = volume.low() {
            return Some(("disk", reason));
        }
    }
    None
}

fn refused(reason: &'static str, status: StatusCode, message: String) -> ApiError {
    metrics::counter!("quiver_writes_refused_total", "reason" => reason).increment(1);
    ApiError::overloaded(status, message, RETRY_AFTER_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_add_up_and_return_on_drop() {
        let budget = WriteBudget::new(10 * 1024);
        let mut a = Charge::default();
        budget.try_charge(&mut a, 4 * 1024).unwrap();
        budget.try_charge(&mut a, 3 * 1024).unwrap();
        assert_eq!(a.kib(), 7);
        let mut b = Charge::default();
        assert_eq!(
            budget.try_charge(&mut b, 4 * 1024),
            Err(ChargeRefused::Busy)
        );
        assert!(matches!(
            budget.try_charge(&mut b, 11 * 1024),
            Err(ChargeRefused::TooLarge { .. })
        ));
        drop(a);
        assert_eq!(budget.bytes_in_use(), 0);
        budget.try_charge(&mut b, 10 * 1024).unwrap();
    }
}
