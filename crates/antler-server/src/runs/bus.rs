//! The event bus: the seam between a run's events and the streams that replay and follow them.
//! A run publishes framed events (each gets an id), any number of subscribers replay from an id
//! and follow live, and closing the stream ends them all.
//!
//! Today's implementation is [`InProcessBus`]: one [`RunBuffer`] per run (broadcast + replay
//! window) in this process. The scale-out implements [`EventBus`] a second time (events over
//! Redis) so any instance can stream any run.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use antler_protocol::{StateSnapshot, StreamModes};
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;

use crate::sse::{Cursor, Kind, RunBuffer, SnapshotSource};

/// A subscriber's stream of ready-to-send SSE bytes.
pub type Subscription = BoxStream<'static, Result<Bytes, Infallible>>;

/// What a subscriber asks of [`RunEvents::subscribe`].
pub struct Subscribe {
    /// Where the replay starts.
    pub cursor: Cursor,
    /// The kinds delivered (`None`: all).
    pub filter: Option<StreamModes>,
    pub heartbeat: Duration,
    /// Runs if the subscriber goes away before `end`.
    pub on_disconnect: Option<Box<dyn FnOnce() + Send>>,
}

/// One run's event stream on the bus.
pub trait RunEvents: Send + Sync + 'static {
    /// Frame and publish one event (`data`: one line of JSON); its id, `None` once closed.
    fn publish(&self, kind: Kind, name: &str, data: &str) -> Option<Arc<str>>;

    /// Publish a `values` event. A bus that keeps events in memory holds the snapshot and
    /// serializes it only for subscribers that want `values`; one that ships events elsewhere
    /// frames it now.
    fn publish_values(&self, state: StateSnapshot) -> Option<Arc<str>> {
        self.publish(
            Kind::Values,
            "values",
            &crate::wire::snapshot_string(&state),
        )
    }

    /// A `values` event the run holds back until its checkpoint is written: prepare it now
    /// (it must not keep the run's live message list, which the run goes on writing in
    /// place) and return what publishes it. A bus that keeps events in memory takes the
    /// snapshot apart; one that ships events elsewhere frames it now.
    fn stage_values(self: Arc<Self>, state: StateSnapshot) -> Box<dyn FnOnce() + Send> {
        let data = crate::wire::snapshot_string(&state);
        drop(state);
        Box::new(move || {
            self.publish(Kind::Values, "values", &data);
        })
    }

    /// No more events: subscribers drain what is left, then get `end`.
    fn close(&self);

    /// The run finished and its checkpoints are durable: `values` states may be read back from
    /// `source` from now on instead of held (a bus that keeps nothing in memory ignores it).
    fn settle(&self, _source: Arc<dyn SnapshotSource>) {}

    /// Memory this process spends keeping the stream replayable after its run finished (0 for
    /// a bus that keeps events elsewhere).
    fn held_bytes(&self) -> usize {
        0
    }

    /// Replay from `sub.cursor` and follow live (see [`Subscribe`]).
    fn subscribe(self: Arc<Self>, sub: Subscribe) -> Subscription;
}

/// Where runs' event streams live.
pub trait EventBus: Send + Sync {
    /// The stream of a new run.
    fn open(&self, run_id: &str) -> Arc<dyn RunEvents>;
}

impl RunEvents for RunBuffer {
    fn publish(&self, kind: Kind, name: &str, data: &str) -> Option<Arc<str>> {
        self.push(kind, name, data)
    }

    fn publish_values(&self, state: StateSnapshot) -> Option<Arc<str>> {
        self.push_values(state)
    }

    fn stage_values(self: Arc<Self>, state: StateSnapshot) -> Box<dyn FnOnce() + Send> {
        let staged = RunBuffer::stage_values(&self, state);
        Box::new(move || {
            if let Some(staged) = staged {
                self.push_staged(staged);
            }
        })
    }

    fn close(&self) {
        RunBuffer::close(self);
    }

    fn settle(&self, source: Arc<dyn SnapshotSource>) {
        RunBuffer::settle(self, source);
    }

    fn held_bytes(&self) -> usize {
        RunBuffer::held_bytes(self)
    }

    fn subscribe(self: Arc<Self>, sub: Subscribe) -> Subscription {
        let Subscribe {
            cursor,
            filter,
            heartbeat,
            on_disconnect,
        } = sub;
        RunBuffer::subscribe(&self, cursor, filter, heartbeat, on_disconnect).boxed()
    }
}

/// Runs' streams in this process's memory, each retaining up to `max_bytes` of frames.
pub struct InProcessBus {
    max_bytes: usize,
}

impl InProcessBus {
    pub fn new(max_bytes: usize) -> InProcessBus {
        InProcessBus { max_bytes }
    }
}

impl EventBus for InProcessBus {
    fn open(&self, run_id: &str) -> Arc<dyn RunEvents> {
        RunBuffer::new(run_id, self.max_bytes)
    }
}
