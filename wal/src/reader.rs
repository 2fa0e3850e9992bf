//! Reading records: from the pending map if not yet written, else by `pread` from the
//! segment file, re-checking each record's CRC.

use std::{ops::Range, sync::Arc};

use bytes::Bytes;

use crate::{
    error::{Error, Result},
    format::{self, FRAME_HEADER_BYTES},
    segment::Segment,
    state::Shared,
};

/// Reads record `index`, if the log holds it.
pub(crate) fn read(shared: &Shared, index: u64) -> Result<Option<Bytes>> {
    let mut out = read_range(shared, index..index.saturating_add(1))?;
    debug_assert!(out.len() <= 1);
    Ok(out.pop().map(|(_, payload)| payload))
}

/// One step of a read plan.
enum Piece {
    /// A record still in the pending map.
    Pending(u64, Bytes),
    /// Consecutive frames of one segment, read with a single `pread`.
    Span {
        segment: Arc<Segment>,
        index_first: u64,
        offsets: Vec<u64>,
        end: u64,
    },
}

/// Reads the records of `range` that the log holds, in index order.
pub(crate) fn read_range(shared: &Shared, range: Range<u64>) -> Result<Vec<(u64, Bytes)>> {
    let state = shared.state.read();
    state.check_poisoned()?;
    let Some(start) = state.start_index else {
        return Ok(Vec::new());
    };
    let lo = range.start.max(start);
    let hi = range.end.min(state.next_index);
    // Plan under the state lock (cheap), read after releasing it (I/O).
    let mut plan: Vec<Piece> = Vec::new();
    for index in lo..hi {
        if let Some(pending) = state.pending.get(&index) {
            plan.push(Piece::Pending(index, pending.payload.clone()));
            continue;
        }
        let span = state
            .segment_for(index)
            .and_then(|view| Some((view, view.frame_span(index)?)));
        let Some((view, (frame_start, frame_end))) = span else {
            // Every logical index is pending or written: a miss is a bug.
            let bug = format!("index {index} is in the log but neither pending nor written");
            debug_assert!(false, "{bug}");
            return Err(Error::Internal(bug));
        };
        if let Some(Piece::Span {
            segment,
            offsets,
            end,
            ..
        }) = plan.last_mut()
        {
            if Arc::ptr_eq(segment, &view.segment) && *end == frame_start {
                offsets.push(frame_start);
                *end = frame_end;
                continue;
            }
        }
        plan.push(Piece::Span {
            segment: Arc::clone(&view.segment),
            index_first: index,
            offsets: vec![frame_start],
            end: frame_end,
        });
    }
    // Keep truncation out of the spans until they are read (see `Segment::reshape_read`).
    let _guards: Vec<_> = plan
        .iter()
        .filter_map(|piece| match piece {
            Piece::Span { segment, .. } => Some(segment.reshape_read()),
            Piece::Pending(..) => None,
        })
        .collect();
    drop(state);

    let mut out = Vec::with_capacity((hi.saturating_sub(lo)) as usize);
    for piece in &plan {
        match piece {
            Piece::Pending(index, payload) => out.push((*index, payload.clone())),
            Piece::Span {
                segment,
                index_first,
                offsets,
                end,
            } => {
                read_span(segment, *index_first, offsets, *end, &mut out)?;
            }
        }
    }
    Ok(out)
}

/// Reads frames `offsets[0]..end` of `segment` at once and verifies each.
fn read_span(
    segment: &Segment,
    index_first: u64,
    offsets: &[u64],
    end: u64,
    out: &mut Vec<(u64, Bytes)>,
) -> Result<()> {
    let Some(&span_start) = offsets.first() else {
        return Ok(());
    };
    let bytes = Bytes::from(segment.read_at(span_start, end - span_start)?);
    for (k, &frame_start) in offsets.iter().enumerate() {
        let frame_end = offsets.get(k + 1).copied().unwrap_or(end);
        let local = (frame_start - span_start) as usize..(frame_end - span_start) as usize;
        let index = index_first + k as u64;
        let payload = format::verify_frame(&bytes[local.clone()], index)
            .map_err(|reason| Error::corrupt(&segment.path, frame_start, reason))?;
        debug_assert_eq!(payload.start, FRAME_HEADER_BYTES);
        out.push((
            index,
            bytes.slice(local.start + payload.start..local.start + payload.end),
        ));
    }
    Ok(())
}
