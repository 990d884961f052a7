//! Server-sent events as LangGraph frames them (spec 70 §4.2, §4.10): a per-run buffer of
//! ready-to-send frames, and the subscriber streams that replay and follow it.
//!
//! A run's events are framed once, when emitted (`event`, single-line `data`, `id:
//! <unix_ms>-<seq>`), and kept in its [`RunBuffer`]; every subscriber (the creating request, later
//! joins, several browser tabs) reads the same bytes through its own cursor, so fan-out costs a
//! reference-count bump per event and a slow client never slows the run. A subscriber whose
//! cursor falls out of the retained window gets one `gap` event and the stream closes; `end` (no
//! id) closes every stream of a finished run; `: heartbeat` comments keep idle streams alive.
//!
//! `values` events are the exception: the buffer keeps the state snapshot itself and frames it
//! when a subscriber that wants `values` reads it. Serializing the whole state after every
//! superstep is the dominant per-step cost at long histories, and most runs (`/runs/wait`,
//! background runs nobody joins) never deliver it; the bytes a late joiner gets are the same
//! either way, since the snapshot is immutable. A snapshot's messages are kept as a chain of
//! the messages appended since the run's previous snapshot ([`Segment`]), never as the run's own
//! list: holding that list would make the run's next append copy all of it.
//!
//! Once a run has finished, its checkpoints are durable and nothing else holds its messages:
//! [`RunBuffer::settle`] then swaps every snapshot that has a stored checkpoint for that
//! checkpoint's id, and a late joiner's replay reads the state back from the store
//! ([`SnapshotSource`]) — the same bytes, without a finished run keeping its whole history in
//! memory for the retention period.

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use antler_protocol::identity::shared_prefix;
use antler_protocol::{Message, Messages, StateSnapshot, StreamModes, ThreadState};
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use serde_json::json;
use tokio::sync::watch;

use values::ValuesEncoder;

mod values;

/// The last frame of every stream.
pub const END_FRAME: &[u8] = b"event: end\ndata: null\n\n";
/// Sent after a quiet interval; both SDKs ignore comment lines.
pub const HEARTBEAT_FRAME: &[u8] = b": heartbeat\n\n";
/// Events always retained per run, whatever their size (DeerFlow's window).
pub const MIN_RETAINED_EVENTS: usize = 256;
/// Frames coalesced into one write.
const MAX_BATCH: usize = 256;

/// What a frame carries, for per-subscriber `stream_mode` filtering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `metadata`, `error`: always delivered.
    Control,
    Values,
    Updates,
    Messages,
    Custom,
}

impl Kind {
    fn wanted(self, modes: StreamModes) -> bool {
        match self {
            Kind::Control => true,
            Kind::Values => modes.values,
            Kind::Updates => modes.updates,
            Kind::Messages => modes.messages,
            Kind::Custom => modes.custom,
        }
    }
}

/// One retained event.
#[derive(Clone, Debug)]
pub struct Frame {
    pub seq: u64,
    pub id: Arc<str>,
    pub kind: Kind,
    payload: Payload,
    /// What retaining it costs, counted against the buffer's byte bound.
    cost: usize,
}

/// A frame's body: ready bytes, or a state framed on delivery — a snapshot in memory, or, once
/// the run settled, the checkpoint that stores it.
#[derive(Clone, Debug)]
enum Payload {
    Ready(Bytes),
    Values(Arc<Snapshot>),
    Stored(Arc<str>),
}

/// What a stored `values` frame costs to keep: its checkpoint id and the frame around it.
const STORED_COST: usize = 96;

/// Where a settled run's `values` states are read back from: its thread's checkpoints.
#[async_trait]
pub trait SnapshotSource: Send + Sync {
    /// The state stored as `checkpoint_id`, `None` when it is gone (thread deleted) or cannot be
    /// read.
    async fn state_at(&self, checkpoint_id: &str) -> Option<ThreadState>;
}

/// A retained `values` snapshot.
#[derive(Debug)]
struct Snapshot {
    /// The non-message channels (`messages` left empty); shared with the run's previous
    /// snapshot while they did not change (most supersteps change messages only).
    fields: Arc<ThreadState>,
    messages: Arc<Segment>,
    /// Messages this snapshot added to the chain (0 when it reuses the previous segment).
    own: usize,
    /// The checkpoint holding this state, if it was stored.
    checkpoint: Option<Arc<str>>,
}

impl Snapshot {
    fn state(&self) -> ThreadState {
        let mut state = (*self.fields).clone();
        state.messages = Messages::from_shared(self.messages.messages());
        state
    }

    /// What holding it costs once the run moved on: its own pointers (the messages appended
    /// since the previous snapshot; message bodies are shared with later states), not its
    /// serialized size.
    fn cost(&self) -> usize {
        const PER_MESSAGE: usize = 16;
        512 + PER_MESSAGE * self.own
    }
}

/// A snapshot's message list: `tail` after the first `prev_take` messages of the list of
/// `prev`. A run's snapshots share the segments of what they have in common, so each holds only
/// what changed since the one before (what was appended, and what follows a message replaced
/// in place, such as token usage's stamp on the newest AI message); the run's live list is
/// never shared, and its appends stay in place.
#[derive(Debug)]
struct Segment {
    prev: Option<Arc<Segment>>,
    /// Messages of `prev`'s list that come before `tail` (at most its length).
    prev_take: usize,
    tail: Vec<Arc<Message>>,
    /// Messages through the end of this segment: `prev_take + tail.len()`.
    len: usize,
    /// Segments in the chain ending here.
    depth: usize,
}

/// A chain longer than this is started afresh with one segment of the whole list (a copy per
/// this many snapshots: amortized a few pointers per snapshot).
const MAX_DEPTH: usize = 64;

impl Segment {
    /// The list's last message.
    fn last(&self) -> Option<&Arc<Message>> {
        // Message `len - 1` is at the same position in every list the chain is built on, until
        // the segment whose tail holds it.
        let at = self.len.checked_sub(1)?;
        let mut seg = Some(self);
        while let Some(s) = seg {
            if at >= s.prev_take {
                return s.tail.get(at - s.prev_take);
            }
            seg = s.prev.as_deref();
        }
        None
    }

    /// The list as the slices it is made of, in order.
    fn tails(&self) -> Vec<&[Arc<Message>]> {
        let mut parts = Vec::with_capacity(self.depth);
        let mut limit = self.len;
        let mut at = Some(self);
        while let Some(seg) = at {
            if limit == 0 {
                break;
            }
            // This segment's list is `prev[..prev_take] ++ tail`; its first `limit` are wanted.
            if limit > seg.prev_take {
                parts.push(&seg.tail[..limit - seg.prev_take]);
                limit = seg.prev_take;
            }
            at = seg.prev.as_deref();
        }
        parts.reverse();
        parts
    }

    fn messages(&self) -> Vec<Arc<Message>> {
        let mut out = Vec::with_capacity(self.len);
        for part in self.tails() {
            out.extend(part.iter().cloned());
        }
        out
    }
}

/// The newest snapshot's segment and the [`Messages::generation`] of the list it was taken of.
struct Chain {
    last: Arc<Segment>,
    generation: u64,
}

/// How many leading messages `segment`'s list and `msgs` share (by address: the chain holds
/// its messages alive, so an equal address is the same message).
fn common_prefix(segment: &Segment, msgs: &[Arc<Message>]) -> usize {
    let mut n = 0;
    for part in segment.tails() {
        let same = shared_prefix(part, &msgs[n..]);
        n += same;
        if same < part.len() {
            break;
        }
    }
    n
}

/// The segment for a snapshot holding `msgs` (of generation `generation`): the newest one
/// extended by what follows the messages they share — when the list only grew since then
/// (the same generation, and the chain's last message still at its place), what was
/// appended, in O(new messages); after a replacement or removal, what follows the first
/// message that differs, found by comparing addresses. A chain at `MAX_DEPTH`, or one that
/// shares nothing with the list, starts afresh. Also returns how many messages the snapshot
/// adds to what the chain holds.
fn extend_chain(
    chain: &mut Option<Chain>,
    msgs: &[Arc<Message>],
    generation: u64,
) -> (Arc<Segment>, usize) {
    if let Some(c) = chain.as_mut() {
        let known = c.last.len;
        let appended = c.generation == generation
            && known <= msgs.len()
            && match (known.checked_sub(1).map(|i| &msgs[i]), c.last.last()) {
                (Some(m), Some(l)) => Arc::ptr_eq(m, l),
                (None, None) => true,
                _ => false,
            };
        if appended && known == msgs.len() {
            return (c.last.clone(), 0);
        }
        let shared = if appended {
            known
        } else {
            common_prefix(&c.last, msgs)
        };
        if (shared > 0 || known == 0) && c.last.depth < MAX_DEPTH {
            let seg = Arc::new(Segment {
                prev: Some(c.last.clone()),
                prev_take: shared,
                tail: msgs[shared..].to_vec(),
                len: msgs.len(),
                depth: c.last.depth + 1,
            });
            c.last = seg.clone();
            c.generation = generation;
            return (seg, msgs.len() - shared);
        }
    }
    let seg = Arc::new(Segment {
        prev: None,
        prev_take: 0,
        tail: msgs.to_vec(),
        len: msgs.len(),
        depth: 1,
    });
    *chain = Some(Chain {
        last: seg.clone(),
        generation,
    });
    (seg, msgs.len())
}

impl Frame {
    /// Appends the frame's SSE bytes to `out`: a `values` snapshot is framed here, from what
    /// `values` (the subscriber's) kept of the states it framed before. A stored state that can
    /// no longer be read is skipped.
    async fn write(
        &self,
        out: &mut BytesMut,
        source: Option<&Arc<dyn SnapshotSource>>,
        values: &mut ValuesEncoder,
    ) {
        let state = match &self.payload {
            Payload::Ready(b) => return out.extend_from_slice(b),
            Payload::Values(snapshot) => {
                if values.write(&snapshot.fields, snapshot.messages.tails(), &self.id, out) {
                    return;
                }
                snapshot.state()
            }
            Payload::Stored(checkpoint) => {
                // The run settled: its messages are read back, not shared with what was kept.
                values.clear();
                let state = match source {
                    Some(source) => source.state_at(checkpoint).await,
                    None => None,
                };
                let Some(state) = state else {
                    tracing::debug!(%checkpoint, event = %self.id, "values event's checkpoint is gone; skipped");
                    return;
                };
                state
            }
        };
        out.extend_from_slice(&frame_bytes(
            "values",
            &crate::wire::state_string(&state),
            &self.id,
        ));
    }
}

/// Parse an event id `<unix_ms>-<seq>` into its sequence number.
pub fn parse_event_id(id: &str) -> Option<u64> {
    let (ms, seq) = id.trim().split_once('-')?;
    if ms.is_empty() || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    seq.parse().ok()
}

/// Frame one event. `data` must be one line of JSON.
pub fn frame_bytes(name: &str, data: &str, id: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(name.len() + data.len() + id.len() + 24);
    b.extend_from_slice(b"event: ");
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(b"\ndata: ");
    b.extend_from_slice(data.as_bytes());
    b.extend_from_slice(b"\nid: ");
    b.extend_from_slice(id.as_bytes());
    b.extend_from_slice(b"\n\n");
    b.freeze()
}

struct BufState {
    frames: VecDeque<Frame>,
    next_seq: u64,
    bytes: usize,
    closed: bool,
    /// The message chain of the newest `values` snapshot.
    chain: Option<Chain>,
    /// The non-message channels of the newest `values` snapshot.
    last_fields: Option<Arc<ThreadState>>,
    /// Set once settled: where stored `values` frames are read back from.
    source: Option<Arc<dyn SnapshotSource>>,
}

/// The retained events of one run, shared by every subscriber.
pub struct RunBuffer {
    run_id: String,
    state: Mutex<BufState>,
    version: watch::Sender<u64>,
    max_bytes: usize,
}

/// Where a subscriber starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cursor {
    /// The earliest retained event.
    Earliest,
    /// Strictly after this event (`id` as the client sent it).
    After { seq: u64, id: String },
}

impl Cursor {
    /// From a `Last-Event-ID` header: absent, `-1` or unparseable → earliest.
    pub fn from_last_event_id(header: Option<&str>) -> Cursor {
        match header.map(str::trim).filter(|h| !h.is_empty()) {
            Some(h) => match parse_event_id(h) {
                Some(seq) => Cursor::After {
                    seq,
                    id: h.to_owned(),
                },
                None => Cursor::Earliest,
            },
            None => Cursor::Earliest,
        }
    }
}

/// A `values` snapshot as a [`RunBuffer`] keeps it, not yet appended.
pub struct StagedValues(Arc<Snapshot>);

enum Read {
    Frames {
        frames: Vec<Frame>,
        closed: bool,
    },
    Gap {
        earliest: Option<Arc<str>>,
        latest: Option<Arc<str>>,
    },
}

impl RunBuffer {
    pub fn new(run_id: impl Into<String>, max_bytes: usize) -> Arc<RunBuffer> {
        Arc::new(RunBuffer {
            run_id: run_id.into(),
            state: Mutex::new(BufState {
                frames: VecDeque::new(),
                next_seq: 0,
                bytes: 0,
                closed: false,
                chain: None,
                last_fields: None,
                source: None,
            }),
            version: watch::channel(0).0,
            max_bytes,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BufState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Frame and append one event; returns its id (`None` once closed).
    pub fn push(&self, kind: Kind, name: &str, data: &str) -> Option<Arc<str>> {
        self.append(kind, |id| Payload::Ready(frame_bytes(name, data, id)))
    }

    /// Append a `values` event holding `state`; it is serialized only when delivered. The
    /// snapshot is let go of before this returns (see [`Segment`]).
    pub fn push_values(&self, snapshot: StateSnapshot) -> Option<Arc<str>> {
        let staged = self.stage_values(snapshot)?;
        self.push_staged(staged)
    }

    /// Take `snapshot` apart into what the buffer keeps of it (O(new messages)), letting go of
    /// the run's list, for [`RunBuffer::push_staged`] later: a run holds its `values` events
    /// until their checkpoint is written, and meanwhile writes its list in place. Snapshots are
    /// staged in the order they are appended.
    pub fn stage_values(&self, snapshot: StateSnapshot) -> Option<StagedValues> {
        let StateSnapshot {
            fields,
            messages: list,
            generation,
            checkpoint_id,
        } = snapshot;
        let (messages, fields) = {
            let mut st = self.lock();
            if st.closed {
                return None;
            }
            // The run hands over the same channels while they do not change.
            let fields = match &st.last_fields {
                Some(last) if Arc::ptr_eq(last, &fields) || last.same_fields(&fields) => {
                    last.clone()
                }
                _ => {
                    st.last_fields = Some(fields.clone());
                    fields
                }
            };
            (extend_chain(&mut st.chain, &list, generation), fields)
        };
        drop(list);
        let (messages, own) = messages;
        Some(StagedValues(Arc::new(Snapshot {
            fields,
            messages,
            own,
            checkpoint: checkpoint_id,
        })))
    }

    /// Append a `values` event staged by [`RunBuffer::stage_values`].
    pub fn push_staged(&self, staged: StagedValues) -> Option<Arc<str>> {
        self.append(Kind::Values, |_| Payload::Values(staged.0))
    }

    fn append(&self, kind: Kind, payload: impl FnOnce(&str) -> Payload) -> Option<Arc<str>> {
        let id: Arc<str> = {
            let mut st = self.lock();
            if st.closed {
                return None;
            }
            let seq = st.next_seq;
            st.next_seq += 1;
            let id = event_id(chrono::Utc::now().timestamp_millis(), seq);
            let payload = payload(&id);
            let cost = match &payload {
                Payload::Ready(b) => b.len(),
                Payload::Values(snapshot) => snapshot.cost(),
                Payload::Stored(_) => STORED_COST,
            };
            st.bytes += cost;
            st.frames.push_back(Frame {
                seq,
                id: id.clone(),
                kind,
                payload,
                cost,
            });
            while st.bytes > self.max_bytes && st.frames.len() > MIN_RETAINED_EVENTS {
                if let Some(old) = st.frames.pop_front() {
                    st.bytes -= old.cost;
                }
            }
            id
        };
        self.version.send_modify(|v| *v += 1);
        Some(id)
    }

    /// No more events: subscribers drain what is left, then get `end`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.version.send_modify(|v| *v += 1);
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// The run is over and its checkpoints are durable: every `values` snapshot that was stored
    /// is kept as its checkpoint's id from now on, read back from `source` when a subscriber
    /// wants it (the same bytes). What the buffer holds of the run's messages is let go of,
    /// except for snapshots that have no checkpoint. A subscriber still reading when this
    /// happens reads the rest back the same way.
    pub fn settle(&self, source: Arc<dyn SnapshotSource>) {
        // The snapshots are dropped outside the lock (freeing a long history takes a while).
        let mut released: Vec<Arc<Snapshot>> = Vec::new();
        {
            let mut st = self.lock();
            let mut bytes = 0;
            for frame in st.frames.iter_mut() {
                let stored = match &frame.payload {
                    Payload::Values(snapshot) => snapshot.checkpoint.clone(),
                    Payload::Ready(_) | Payload::Stored(_) => None,
                };
                if let Some(id) = stored {
                    if let Payload::Values(snapshot) =
                        std::mem::replace(&mut frame.payload, Payload::Stored(id))
                    {
                        released.push(snapshot);
                    }
                    frame.cost = STORED_COST;
                }
                bytes += frame.cost;
            }
            st.bytes = bytes;
            st.chain = None;
            st.last_fields = None;
            st.source = Some(source);
        }
        drop(released);
    }

    /// Events emitted so far (retained or not).
    pub fn emitted(&self) -> u64 {
        self.lock().next_seq
    }

    /// Bytes currently retained (a `values` snapshot counts what holding it costs).
    pub fn retained_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// What keeping this buffer costs once its run is over: the framed events, and the messages
    /// its `values` snapshots keep alive, which by then nothing else need hold — every version
    /// of every message any snapshot holds (a replaced message stays in older snapshots), each
    /// at its estimated heap size with the parts versions share counted once. Walks each
    /// segment of the snapshots' chains once: O(messages retained), once per finished run.
    pub fn held_bytes(&self) -> usize {
        let st = self.lock();
        let mut segments: HashSet<usize> = HashSet::new();
        let mut messages: HashSet<usize> = HashSet::new();
        let mut parts: HashSet<usize> = HashSet::new();
        let mut held = st.bytes;
        for frame in &st.frames {
            let Payload::Values(snapshot) = &frame.payload else {
                continue;
            };
            let mut at = Some(&snapshot.messages);
            while let Some(seg) = at {
                if !segments.insert(Arc::as_ptr(seg) as usize) {
                    break;
                }
                held += seg.tail.capacity() * std::mem::size_of::<Arc<Message>>();
                for m in &seg.tail {
                    if messages.insert(Arc::as_ptr(m) as usize) {
                        held += m.heap_estimate(&mut parts);
                    }
                }
                at = seg.prev.as_ref();
            }
        }
        held
    }

    fn source(&self) -> Option<Arc<dyn SnapshotSource>> {
        self.lock().source.clone()
    }

    fn read(&self, cursor: &Cursor) -> Read {
        let st = self.lock();
        let first = st.frames.front().map_or(st.next_seq, |f| f.seq);
        let start = match cursor {
            Cursor::Earliest => first,
            Cursor::After { seq, .. } => seq.saturating_add(1),
        };
        if start < first {
            return Read::Gap {
                earliest: st.frames.front().map(|f| f.id.clone()),
                latest: st.frames.back().map(|f| f.id.clone()),
            };
        }
        let skip = usize::try_from(start - first).unwrap_or(usize::MAX);
        let frames = st
            .frames
            .iter()
            .skip(skip)
            .take(MAX_BATCH)
            .cloned()
            .collect();
        Read::Frames {
            frames,
            closed: st.closed,
        }
    }

    /// A subscriber stream starting at `cursor`, delivering the frames `filter` wants (`None`:
    /// all). `on_disconnect` runs if the client goes away before `end` (not after a `gap`).
    pub fn subscribe(
        self: &Arc<Self>,
        cursor: Cursor,
        filter: Option<StreamModes>,
        heartbeat: Duration,
        on_disconnect: Option<Box<dyn FnOnce() + Send>>,
    ) -> impl futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
        let sub = Subscriber {
            rx: self.version.subscribe(),
            buffer: self.clone(),
            cursor,
            filter,
            heartbeat,
            beat: None,
            active: tokio::time::Instant::now(),
            done: false,
            guard: DisconnectGuard(on_disconnect),
            values: ValuesEncoder::default(),
        };
        futures::stream::unfold(sub, |mut sub| async move {
            sub.next_chunk().await.map(|b| (Ok(b), sub))
        })
    }
}

/// Runs its callback when dropped armed.
struct DisconnectGuard(Option<Box<dyn FnOnce() + Send>>);

impl DisconnectGuard {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for DisconnectGuard {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

struct Subscriber {
    buffer: Arc<RunBuffer>,
    rx: watch::Receiver<u64>,
    cursor: Cursor,
    filter: Option<StreamModes>,
    heartbeat: Duration,
    /// Fires a heartbeat `heartbeat` after the last activity. It is armed once (at the first
    /// wait, inside the runtime) and moved only when it fires early (there was activity
    /// since): arming a timer per wait would take the timer wheel's lock on every event.
    beat: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// When the stream last woke for an event or sent something.
    active: tokio::time::Instant,
    done: bool,
    guard: DisconnectGuard,
    /// The JSON of the messages of the last `values` frame it wrote.
    values: ValuesEncoder,
}

impl Subscriber {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if self.done {
                return None;
            }
            // Mark the version seen before reading, so a push after the read wakes us.
            self.rx.borrow_and_update();
            match self.buffer.read(&self.cursor) {
                Read::Gap { earliest, latest } => {
                    self.done = true;
                    self.guard.disarm();
                    let requested = match &self.cursor {
                        Cursor::After { id, .. } => id.clone(),
                        Cursor::Earliest => String::new(),
                    };
                    let data = json!({
                        "code": "stream_replay_gap",
                        "run_id": self.buffer.run_id,
                        "requested_event_id": requested,
                        "earliest_available_event_id": earliest.as_deref(),
                        "latest_available_event_id": latest.as_deref(),
                        "recovery": "reload_durable_state",
                    });
                    return Some(Bytes::from(format!("event: gap\ndata: {data}\n\n")));
                }
                Read::Frames { frames, closed } => {
                    if let Some(last) = frames.last() {
                        self.cursor = Cursor::After {
                            seq: last.seq,
                            id: last.id.to_string(),
                        };
                        let wanted: Vec<&Frame> = frames
                            .iter()
                            .filter(|f| self.filter.is_none_or(|m| f.kind.wanted(m)))
                            .collect();
                        let source = match wanted
                            .iter()
                            .any(|f| matches!(f.payload, Payload::Stored(_)))
                        {
                            true => self.buffer.source(),
                            false => None,
                        };
                        // One ready frame goes out as it is; anything else is written into
                        // one buffer.
                        if let [Frame {
                            payload: Payload::Ready(b),
                            ..
                        }] = wanted.as_slice()
                        {
                            self.active = tokio::time::Instant::now();
                            return Some(b.clone());
                        }
                        let len = wanted
                            .iter()
                            .map(|f| match &f.payload {
                                Payload::Ready(b) => b.len(),
                                Payload::Values(_) | Payload::Stored(_) => self.values.size_hint(),
                            })
                            .sum();
                        let mut out = BytesMut::with_capacity(len);
                        for f in wanted {
                            f.write(&mut out, source.as_ref(), &mut self.values).await;
                        }
                        if out.is_empty() {
                            continue;
                        }
                        self.active = tokio::time::Instant::now();
                        return Some(out.freeze());
                    }
                    if closed {
                        self.done = true;
                        self.guard.disarm();
                        return Some(Bytes::from_static(END_FRAME));
                    }
                }
            }
            let active = self.active;
            let heartbeat = self.heartbeat;
            let beat = self
                .beat
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(active + heartbeat)));
            loop {
                tokio::select! {
                    changed = self.rx.changed() => {
                        self.active = tokio::time::Instant::now();
                        if changed.is_err() {
                            // The buffer is gone: nothing more will come.
                            self.done = true;
                            self.guard.disarm();
                            return Some(Bytes::from_static(END_FRAME));
                        }
                        break;
                    }
                    () = beat.as_mut() => {
                        let due = self.active + heartbeat;
                        if tokio::time::Instant::now() < due {
                            beat.as_mut().reset(due);
                            continue;
                        }
                        self.active = tokio::time::Instant::now();
                        beat.as_mut().reset(self.active + heartbeat);
                        return Some(Bytes::from_static(HEARTBEAT_FRAME));
                    }
                }
            }
        }
    }
}

/// A stream that only says `end` (run finished, buffer released).
pub fn end_only() -> impl futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    futures::stream::iter([Ok(Bytes::from_static(END_FRAME))])
}

/// An SSE event id, `{unix millis}-{seq}`, written on the stack: one allocation (the `Arc`) per
/// frame instead of two.
fn event_id(millis: i64, seq: u64) -> Arc<str> {
    use std::io::Write as _;
    // i64 and u64 in decimal with a sign and a dash: at most 41 bytes.
    let mut buf = [0u8; 48];
    let mut cur = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(cur, "{millis}-{seq}");
    let n = usize::try_from(cur.position()).unwrap_or(0);
    Arc::from(std::str::from_utf8(&buf[..n]).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use futures::StreamExt;

    #[test]
    fn event_ids_are_millis_dash_seq_at_any_size() {
        assert_eq!(&*event_id(1_765_000_000_123, 7), "1765000000123-7");
        assert_eq!(
            &*event_id(i64::MIN, u64::MAX),
            format!("{}-{}", i64::MIN, u64::MAX)
        );
    }

    fn text(b: &Bytes) -> String {
        String::from_utf8(b.to_vec()).unwrap()
    }

    /// Everything a subscriber from `cursor` receives (no heartbeat within a test).
    async fn replay(buf: &Arc<RunBuffer>, cursor: Cursor, filter: Option<StreamModes>) -> String {
        collect(buf.subscribe(cursor, filter, Duration::from_secs(60), None)).await
    }

    async fn collect(s: impl futures::Stream<Item = Result<Bytes, Infallible>>) -> String {
        let mut out = String::new();
        futures::pin_mut!(s);
        while let Some(Ok(b)) = s.next().await {
            out.push_str(&text(&b));
        }
        out
    }

    #[test]
    fn frames_are_event_data_id() {
        let f = frame_bytes("values", "{\"a\":1}", "17-0");
        assert_eq!(text(&f), "event: values\ndata: {\"a\":1}\nid: 17-0\n\n");
        assert_eq!(parse_event_id("1755854660123-41"), Some(41));
        assert_eq!(parse_event_id("-1"), None);
        assert_eq!(parse_event_id("abc"), None);
        assert_eq!(Cursor::from_last_event_id(Some("-1")), Cursor::Earliest);
        assert_eq!(Cursor::from_last_event_id(None), Cursor::Earliest);
    }

    #[tokio::test]
    async fn replay_then_end_and_resume_after_an_id() {
        let buf = RunBuffer::new("r1", usize::MAX);
        buf.push(Kind::Control, "metadata", "{}");
        let id1 = buf.push(Kind::Values, "values", "{\"n\":1}").unwrap();
        buf.push(Kind::Updates, "updates", "{\"n\":2}");
        buf.close();
        let all = replay(&buf, Cursor::Earliest, None).await;
        assert_eq!(all.matches("event: ").count(), 4);
        assert!(all.ends_with("event: end\ndata: null\n\n"));
        assert!(all.contains("id: "));
        let after = replay(&buf, Cursor::from_last_event_id(Some(&id1)), None).await;
        assert!(after.starts_with("event: updates"), "{after}");
        let only_values = replay(
            &buf,
            Cursor::Earliest,
            Some(StreamModes {
                values: true,
                ..StreamModes::NONE
            }),
        )
        .await;
        assert!(only_values.contains("event: metadata"));
        assert!(only_values.contains("event: values"));
        assert!(!only_values.contains("event: updates"));
    }

    #[tokio::test]
    async fn an_evicted_cursor_gets_a_gap_without_id() {
        let buf = RunBuffer::new("r1", 1);
        let mut first = None;
        for i in 0..(MIN_RETAINED_EVENTS + 10) {
            let id = buf.push(Kind::Custom, "custom", &format!("{{\"i\":{i}}}"));
            first.get_or_insert(id);
        }
        let first = first.flatten().unwrap();
        let out = replay(&buf, Cursor::from_last_event_id(Some(&first)), None).await;
        assert!(out.starts_with("event: gap\ndata: {"), "{out}");
        assert!(!out.contains("\nid:"));
        assert!(!out.contains("event: end"));
        let v: serde_json::Value =
            serde_json::from_str(out.lines().nth(1).unwrap().strip_prefix("data: ").unwrap())
                .unwrap();
        assert_eq!(v["code"], "stream_replay_gap");
        assert_eq!(v["requested_event_id"], first.as_ref());
        assert!(v["earliest_available_event_id"]
            .as_str()
            .unwrap()
            .ends_with("-10"));
    }

    fn long_state(n: usize) -> Arc<ThreadState> {
        let mut state = ThreadState::default();
        for i in 0..n {
            state.messages.push(antler_protocol::Message::human(format!(
                "message {i} {}",
                "x".repeat(200)
            )));
        }
        Arc::new(state)
    }

    #[tokio::test]
    async fn values_snapshots_are_framed_on_delivery_as_when_emitted() {
        let buf = RunBuffer::new("r1", usize::MAX);
        let state = long_state(3);
        let id = buf.push_values(state.snapshot()).unwrap();
        buf.close();
        let out = replay(&buf, Cursor::Earliest, None).await;
        let expected = frame_bytes("values", &crate::wire::state_string(&state), &id);
        assert_eq!(
            out,
            format!("{}event: end\ndata: null\n\n", text(&expected))
        );
        // A subscriber that did not ask for `values` never sees it.
        let none = replay(
            &buf,
            Cursor::Earliest,
            Some(StreamModes {
                updates: true,
                ..StreamModes::NONE
            }),
        )
        .await;
        assert_eq!(none, "event: end\ndata: null\n\n");
    }

    #[test]
    fn retained_values_cost_far_less_than_their_json_and_stay_bounded() {
        let state = long_state(1000);
        let json_len = crate::wire::state_string(&state).len();
        let max = 16 << 20;
        let buf = RunBuffer::new("r1", max);
        for _ in 0..(4 * MIN_RETAINED_EVENTS) {
            buf.push_values(state.snapshot());
            buf.push(Kind::Custom, "custom", "{}");
        }
        // 1,000 snapshots of a 1,000-message state: pointer arrays held, not 1,000 × its JSON.
        let first = buf.lock().frames.iter().find_map(|f| match &f.payload {
            Payload::Values(s) => Some(s.cost()),
            Payload::Ready(_) | Payload::Stored(_) => None,
        });
        assert!(first.is_some_and(|c| c * 4 < json_len), "{json_len}");
        assert!(buf.retained_bytes() <= max, "{}", buf.retained_bytes());
        let st = buf.lock();
        assert!(st.frames.len() >= MIN_RETAINED_EVENTS);
        assert_eq!(st.bytes, st.frames.iter().map(|f| f.cost).sum::<usize>());
    }

    /// A staged snapshot lets go of the run's list at once: the run's next in-place write
    /// does not copy it, and the snapshot, appended later, still frames as the state it was
    /// staged at.
    #[tokio::test]
    async fn a_staged_snapshot_frames_its_state_without_holding_the_list() {
        use antler_protocol::Message;
        let buf = RunBuffer::new("r1", usize::MAX);
        let mut live = ThreadState::default();
        for i in 0..5 {
            let mut m = Message::ai(format!("m{i}"));
            m.set_id(format!("id{i}"));
            live.messages.push(m);
        }
        let list = |live: &ThreadState| Arc::as_ptr(&live.messages.shared());
        let mut states = Vec::new();
        let mut staged = Vec::new();
        for round in 0..3 {
            states.push(crate::wire::state_string(&live));
            staged.push(buf.stage_values(live.snapshot()).unwrap());
            // Token usage's stamp: the newest message replaced in place, the same list.
            let before = list(&live);
            let mut stamped = Message::ai(format!("m4 stamped {round}"));
            stamped.set_id("id4");
            live.messages.push(stamped);
            assert_eq!(list(&live), before, "round {round}: the list was copied");
        }
        let mut expected = String::new();
        for (state, staged) in states.iter().zip(staged) {
            let id = buf.push_staged(staged).unwrap();
            expected.push_str(&text(&frame_bytes("values", state, &id)));
        }
        buf.close();
        let out = replay(&buf, Cursor::Earliest, None).await;
        assert_eq!(out, format!("{expected}event: end\ndata: null\n\n"));
    }

    /// Every retained snapshot frames as the state it was taken of, whatever the run did to its
    /// list afterwards (appends, a replacement, a removal, a chain longer than `MAX_DEPTH`).
    #[tokio::test]
    async fn chained_snapshots_frame_as_the_states_they_were_taken_of() {
        use antler_protocol::Message;
        let buf = RunBuffer::new("r1", usize::MAX);
        let mut live = ThreadState::default();
        let mut expected = Vec::new();
        let snap = |live: &ThreadState, expected: &mut Vec<String>| {
            let id = buf.push_values(live.snapshot()).unwrap();
            expected.push(text(&frame_bytes(
                "values",
                &crate::wire::state_string(live),
                &id,
            )));
        };
        for i in 0..(MAX_DEPTH + 10) {
            let mut m = Message::human(format!("m{i}"));
            m.set_id(format!("id{i}"));
            live.messages.push(m);
            if i % 7 == 0 {
                live.title = Some(format!("title {i}"));
            }
            snap(&live, &mut expected);
        }
        // Nothing changed: the same list again.
        snap(&live, &mut expected);
        // A replacement by id, then a removal: the list no longer extends the chain.
        let mut replaced = Message::human("replaced");
        replaced.set_id("id3");
        live.messages.push(replaced);
        snap(&live, &mut expected);
        live.messages.add(vec![Message::remove("id5")]).unwrap();
        snap(&live, &mut expected);
        live.messages.push(Message::human("after"));
        snap(&live, &mut expected);
        buf.close();
        let out = replay(&buf, Cursor::Earliest, None).await;
        assert_eq!(
            out,
            format!("{}event: end\ndata: null\n\n", expected.concat())
        );
        let st = buf.lock();
        assert!(st.chain.as_ref().is_some_and(|c| c.last.depth <= MAX_DEPTH));
        // The non-message channels are held once per change (the title, every 7th message),
        // not once per snapshot.
        let mut fields: Vec<*const ThreadState> = st
            .frames
            .iter()
            .filter_map(|f| match &f.payload {
                Payload::Values(s) => Some(Arc::as_ptr(&s.fields)),
                Payload::Ready(_) | Payload::Stored(_) => None,
            })
            .collect();
        fields.dedup();
        assert_eq!(fields.len(), (MAX_DEPTH + 10).div_ceil(7));
    }

    /// The buffer lets go of a snapshot's list before `push_values` returns, so the run's next
    /// append goes in place instead of copying the whole list.
    #[test]
    fn a_retained_snapshot_does_not_share_the_runs_list() {
        let buf = RunBuffer::new("r1", usize::MAX);
        let mut live = (*long_state(100)).clone();
        buf.push_values(live.snapshot());
        buf.push_values(live.snapshot());
        let list = live.messages.shared();
        assert_eq!(
            Arc::strong_count(&list),
            2,
            "the live list and this handle only"
        );
        drop(list);
        live.messages.push(antler_protocol::Message::human("next"));
        buf.push_values(live.snapshot());
        // The frames hold 100 + 0 + 1 messages of their own, not three copies of the list.
        assert_eq!(own_messages(&buf), [100, 0, 1]);
    }

    /// What each retained `values` snapshot adds to the chain.
    fn own_messages(buf: &RunBuffer) -> Vec<usize> {
        buf.lock()
            .frames
            .iter()
            .filter_map(|f| match &f.payload {
                Payload::Values(s) => Some(s.own),
                Payload::Ready(_) | Payload::Stored(_) => None,
            })
            .collect()
    }

    /// A message replaced in place (token usage stamps the newest AI message after every model
    /// call) costs the next snapshot what follows the first changed message, not a copy of the
    /// whole list; an early replacement or a removal costs what follows it. Every snapshot still
    /// frames as the state it was taken of.
    #[tokio::test]
    async fn a_replacement_extends_the_chain_from_the_first_changed_message() {
        use antler_protocol::Message;
        let buf = RunBuffer::new("r1", usize::MAX);
        let mut live = (*long_state(100)).clone();
        let mut expected = Vec::new();
        let mut snap = |live: &ThreadState| {
            let id = buf.push_values(live.snapshot()).unwrap();
            expected.push(text(&frame_bytes(
                "values",
                &crate::wire::state_string(live),
                &id,
            )));
        };
        snap(&live);
        for step in 0..3 {
            let mut ai = Message::ai(format!("answer {step}"));
            ai.set_id(format!("ai-{step}"));
            live.messages.push(ai);
            snap(&live);
            let mut stamped = Message::ai(format!("answer {step}, stamped"));
            stamped.set_id(format!("ai-{step}"));
            live.messages.push(stamped);
            snap(&live);
        }
        // An early replacement (position 10), then a removal (position 20).
        let id_at = |live: &ThreadState, i: usize| {
            live.messages
                .get(i)
                .and_then(Message::id)
                .unwrap()
                .to_owned()
        };
        let mut replaced = Message::human("early, replaced");
        replaced.set_id(id_at(&live, 10));
        live.messages.push(replaced);
        snap(&live);
        let gone = id_at(&live, 20);
        live.messages.add(vec![Message::remove(gone)]).unwrap();
        snap(&live);
        assert_eq!(own_messages(&buf), [100, 1, 1, 1, 1, 1, 1, 93, 82]);
        buf.close();
        let out = replay(&buf, Cursor::Earliest, None).await;
        assert_eq!(
            out,
            format!("{}event: end\ndata: null\n\n", expected.concat())
        );
    }

    /// A finished run's retained snapshots are the last owners of its messages, every version
    /// of them: a message replaced after a snapshot (token usage's stamp) is held twice, and its
    /// parts the versions share once.
    #[test]
    fn held_bytes_count_every_version_the_snapshots_keep() {
        use antler_protocol::{AiMessage, Message, StateUpdate, ToolCall};
        let call = |id: &str| {
            let args = serde_json::json!({"command": "echo hi"});
            let args = args.as_object().cloned().unwrap_or_default();
            ToolCall::new(id, "bash", args)
        };
        let decoded = AiMessage {
            id: Some("m1".into()),
            tool_calls: vec![call("c1"), call("c2")].into(),
            ..Default::default()
        };
        let buf = RunBuffer::new("r1", usize::MAX);
        let mut live = ThreadState::default();
        live.apply(StateUpdate::messages(vec![Message::Ai(decoded.clone())]))
            .unwrap();
        buf.push_values(live.snapshot());
        let one = buf.held_bytes();
        let frames_one = buf.retained_bytes();
        let mut parts = HashSet::new();
        let alone = Message::Ai(decoded.clone()).heap_estimate(&mut parts);
        assert!(one >= frames_one + alone, "{one} < {frames_one} + {alone}");

        let mut stamped = decoded;
        stamped.additional_kwargs.insert(
            "token_usage_attribution".into(),
            serde_json::json!({"kind": "tool"}),
        );
        live.apply(StateUpdate::messages(vec![Message::Ai(stamped.clone())]))
            .unwrap();
        buf.push_values(live.snapshot());
        let two = buf.held_bytes();
        let frame = buf.retained_bytes() - frames_one;
        // Beside the second frame: the stamped version's own block and map (the first version
        // stays held by the first snapshot), not its tool calls again.
        let own = Message::Ai(stamped.clone()).heap_estimate(&mut parts);
        let alone = Message::Ai(stamped).heap_estimate(&mut HashSet::new());
        assert!(own < alone);
        assert!(two >= one + frame + own, "{two} < {one} + {frame} + {own}");
        assert!(
            two < one + frame + alone,
            "{two} vs {one} + {frame} + {alone}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idle_streams_get_heartbeats_and_live_events() {
        let buf = RunBuffer::new("r1", usize::MAX);
        let s = buf.subscribe(Cursor::Earliest, None, Duration::from_secs(15), None);
        futures::pin_mut!(s);
        let hb = s.next().await.unwrap().unwrap();
        assert_eq!(&hb[..], HEARTBEAT_FRAME);
        let b2 = buf.clone();
        tokio::spawn(async move {
            b2.push(Kind::Custom, "custom", "{}");
            b2.close();
        });
        let ev = s.next().await.unwrap().unwrap();
        assert!(text(&ev).starts_with("event: custom"));
        let end = s.next().await.unwrap().unwrap();
        assert_eq!(&end[..], END_FRAME);
        assert!(s.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_with_events_more_often_than_the_heartbeat_gets_none() {
        let buf = RunBuffer::new("r1", usize::MAX);
        let s = buf.subscribe(Cursor::Earliest, None, Duration::from_secs(15), None);
        futures::pin_mut!(s);
        let b2 = buf.clone();
        tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_secs(10)).await;
                b2.push(Kind::Custom, "custom", "{}");
            }
        });
        for _ in 0..5 {
            let ev = s.next().await.unwrap().unwrap();
            assert!(text(&ev).starts_with("event: custom"), "{}", text(&ev));
        }
        // Idle from here: the next is a heartbeat, 15 s after the last event.
        let start = tokio::time::Instant::now();
        let hb = s.next().await.unwrap().unwrap();
        assert_eq!(&hb[..], HEARTBEAT_FRAME);
        assert_eq!(start.elapsed(), Duration::from_secs(15));
        let hb = s.next().await.unwrap().unwrap();
        assert_eq!(&hb[..], HEARTBEAT_FRAME);
        assert_eq!(start.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test]
    async fn dropping_an_unfinished_stream_runs_the_disconnect_hook() {
        let buf = RunBuffer::new("r1", usize::MAX);
        let (tx, rx) = std::sync::mpsc::channel();
        let tx2 = tx.clone();
        let s = buf.subscribe(
            Cursor::Earliest,
            None,
            Duration::from_secs(60),
            Some(Box::new(move || tx.send("dropped").unwrap())),
        );
        drop(s);
        assert_eq!(rx.try_recv(), Ok("dropped"));
        buf.close();
        let s = buf.subscribe(
            Cursor::Earliest,
            None,
            Duration::from_secs(60),
            Some(Box::new(move || tx2.send("dropped").unwrap())),
        );
        assert!(collect(s).await.ends_with("event: end\ndata: null\n\n"));
        assert!(rx.try_recv().is_err());
    }

    /// A stand-in for a thread's checkpoints: states by id, and which ids were read.
    #[derive(Default)]
    struct Stored {
        states: Mutex<std::collections::HashMap<String, ThreadState>>,
        reads: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl SnapshotSource for Stored {
        async fn state_at(&self, checkpoint_id: &str) -> Option<ThreadState> {
            self.reads.lock().unwrap().push(checkpoint_id.to_owned());
            self.states.lock().unwrap().get(checkpoint_id).cloned()
        }
    }

    /// Settling a finished run's buffer lets go of its messages; a late joiner replays the
    /// same bytes, read back from the checkpoints. A snapshot without a checkpoint stays in
    /// memory; one whose checkpoint is gone is left out of the replay.
    #[tokio::test]
    async fn a_settled_run_replays_the_same_bytes_from_its_checkpoints() {
        use antler_protocol::Message;
        let buf = RunBuffer::new("r1", usize::MAX);
        let source = Arc::new(Stored::default());
        let mut live = ThreadState::default();
        buf.push(Kind::Control, "metadata", "{\"run_id\":\"r1\"}");
        // Snapshot 0 has no checkpoint; 1..=5 do.
        live.messages.push(Message::human("first"));
        buf.push_values(live.snapshot());
        let mut probe = None;
        for i in 1..=5 {
            let mut m = Message::ai(format!("answer {i} {}", "x".repeat(2_000)));
            m.set_id(format!("m{i}"));
            live.messages.push(m);
            if i == 3 {
                live.title = Some("a title".into());
            }
            let id = format!("cp{i}");
            // As a store holds it: its own copy, not the run's messages.
            let stored: ThreadState =
                serde_json::from_value(serde_json::to_value(&live).unwrap()).unwrap();
            source.states.lock().unwrap().insert(id.clone(), stored);
            buf.push_values(live.snapshot().stored_as(Some(id.into())));
            buf.push(Kind::Updates, "updates", &format!("{{\"n\":{i}}}"));
            probe.get_or_insert_with(|| live.messages.shared()[1].clone());
        }
        buf.close();
        let before = replay(&buf, Cursor::Earliest, None).await;
        let held_before = buf.held_bytes();
        let probe = Arc::downgrade(&probe.unwrap());
        drop(live);

        buf.settle(source.clone());
        assert!(
            probe.upgrade().is_none(),
            "the buffer let go of the messages"
        );
        let held_after = buf.held_bytes();
        assert!(
            held_after * 5 < held_before && held_after < 2_000,
            "{held_before} -> {held_after} bytes"
        );
        assert_eq!(replay(&buf, Cursor::Earliest, None).await, before);
        assert_eq!(
            *source.reads.lock().unwrap(),
            ["cp1", "cp2", "cp3", "cp4", "cp5"]
        );
        // Resuming after an event reads only what follows it.
        source.reads.lock().unwrap().clear();
        let third = buf.lock().frames[6].id.clone();
        let tail = replay(&buf, Cursor::from_last_event_id(Some(&third)), None).await;
        assert!(before.ends_with(&tail));
        assert_eq!(*source.reads.lock().unwrap(), ["cp4", "cp5"]);
        // Not wanted, not read.
        source.reads.lock().unwrap().clear();
        let updates = replay(
            &buf,
            Cursor::Earliest,
            Some(StreamModes {
                updates: true,
                ..StreamModes::NONE
            }),
        )
        .await;
        assert_eq!(updates.matches("event: updates").count(), 5);
        assert!(source.reads.lock().unwrap().is_empty());
        // A checkpoint that is gone (thread deleted): its event is left out, the rest arrive.
        source.states.lock().unwrap().remove("cp2");
        let without = replay(&buf, Cursor::Earliest, None).await;
        assert_eq!(without.matches("event: values").count(), 5);
        assert_eq!(without.matches("event: updates").count(), 5);
        assert!(without.ends_with("event: end\ndata: null\n\n"));
    }
}
