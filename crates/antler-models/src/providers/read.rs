//! The time limits of one model call, enforced by the driver for every wire format: the overall
//! call deadline (`call_timeout`) and the stall detector of a streamed body
//! (`stream_chunk_timeout`).
//!
//! Only decoded events the provider's fold counts as progress reset the stall timer: SSE
//! comments (`: ping`), partial lines and keep-alive events (Anthropic's `ping`) do not, so a
//! server that keeps the connection warm without answering still stalls out. The call deadline
//! bounds everything else, including a stream that trickles real events forever.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::driver::{Framing, StreamFold};
use super::sse::SseDecoder;
use crate::{ChunkSink, ModelError};

/// The end of a call's time budget, fixed when the call starts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallDeadline {
    /// `None` when the budget reaches past what the clock can represent (no deadline).
    at: Option<Instant>,
    total: Duration,
}

impl CallDeadline {
    pub(crate) fn start(total: Duration) -> Self {
        CallDeadline {
            at: Instant::now().checked_add(total),
            total,
        }
    }

    /// `fut`, cut off with [`ModelError::Timeout`] of the whole budget when the deadline passes.
    pub(crate) async fn bound<T>(
        &self,
        model: &str,
        fut: impl Future<Output = Result<T, ModelError>>,
    ) -> Result<T, ModelError> {
        let Some(at) = self.at else {
            return fut.await;
        };
        match tokio::time::timeout_at(at, fut).await {
            Ok(r) => r,
            Err(_) => Err(self.expired(model)),
        }
    }

    fn expired(&self, model: &str) -> ModelError {
        tracing::warn!(model, total = ?self.total, "model call exceeded its call_timeout");
        ModelError::Timeout(self.total)
    }
}

/// Which limit a wait runs into first.
#[derive(Clone, Copy)]
enum Limit {
    Stall,
    Call,
}

/// Read a streamed body into `fold` until it ends, `fold` says done, or a limit runs out: no
/// progress for `gap` → `Timeout(gap)`, the call deadline → `Timeout(call_timeout)`. Either
/// limit hit after the answer completed keeps the answer.
pub(crate) async fn read_stream<F: StreamFold>(
    resp: &mut reqwest::Response,
    framing: Framing,
    fold: &mut F,
    emit: ChunkSink<'_>,
    gap: Duration,
    deadline: &CallDeadline,
    model: &str,
) -> Result<(), ModelError> {
    let mut decoder = SseDecoder::for_framing(framing);
    let mut events = Vec::new();
    let mut last_progress = Instant::now();
    loop {
        let limit = match (last_progress.checked_add(gap), deadline.at) {
            (Some(stall), Some(call)) if call <= stall => Some((call, Limit::Call)),
            (Some(stall), _) => Some((stall, Limit::Stall)),
            (None, Some(call)) => Some((call, Limit::Call)),
            (None, None) => None,
        };
        let read = match limit {
            Some((at, which)) => tokio::time::timeout_at(at, resp.chunk())
                .await
                .map_err(|_| which),
            None => Ok(resp.chunk().await),
        };
        let next = match read {
            Err(_) if fold.finished() => {
                // Answer complete, but neither the end marker nor the end of the body followed.
                tracing::debug!(model, ?gap, "stream went quiet after the answer completed");
                return Ok(());
            }
            Err(Limit::Stall) => {
                tracing::debug!(model, ?gap, "stream stalled");
                return Err(ModelError::Timeout(gap));
            }
            Err(Limit::Call) => return Err(deadline.expired(model)),
            Ok(Err(e)) if fold.finished() => {
                tracing::debug!(model, error = %e, "stream broke off after the answer completed; keeping it");
                return Ok(());
            }
            Ok(Err(e)) => {
                return Err(ModelError::Stream(format!(
                    "reading the stream failed: {}",
                    super::http::describe(&e)
                )))
            }
            Ok(Ok(next)) => next,
        };
        let ended = next.is_none();
        match next {
            Some(bytes) => decoder
                .push(&bytes, &mut events)
                .map_err(|_| ModelError::Stream("stream line exceeds the size limit".into()))?,
            None => decoder.finish(&mut events),
        }
        let mut progressed = false;
        for event in events.drain(..) {
            progressed |= !event.data.trim().is_empty() && !fold.is_keepalive(&event);
            if fold.on_event(&event, emit)? {
                return Ok(());
            }
        }
        if progressed {
            last_progress = Instant::now();
        }
        if ended {
            if !fold.finished() {
                return Err(ModelError::Stream(
                    "connection closed before the response completed".into(),
                ));
            }
            // Some servers end the body without the end marker after the finish reason.
            return Ok(());
        }
    }
}
