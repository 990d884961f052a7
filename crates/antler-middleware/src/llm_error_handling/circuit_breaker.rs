//! The LLM circuit breaker (`circuit_breaker:`, spec 60 §23) and the clock it and the retry
//! backoff read: closed → open after `failure_threshold` consecutive failed calls, half-open
//! after `recovery_timeout_sec` with a single probe whose outcome closes or re-opens it. One
//! breaker is shared by every run of the process.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use super::CircuitBreakerConfig;

/// Time as the breaker and the backoff see it; tests substitute [`ManualClock`].
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
    fn sleep(&self, duration: Duration) -> BoxFuture<'_, ()>;
}

/// Real time: `Instant::now` and tokio's timer.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn sleep(&self, duration: Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A clock that only moves when told to. `sleep` returns at once, records the duration and
/// advances the clock by it, so retry waits are observable without waiting.
#[derive(Debug)]
pub struct ManualClock {
    base: Instant,
    state: Mutex<(Duration, Vec<Duration>)>,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    pub fn new() -> Self {
        ManualClock {
            base: Instant::now(),
            state: Mutex::new((Duration::ZERO, Vec::new())),
        }
    }

    pub fn advance(&self, by: Duration) {
        lock(&self.state).0 += by;
    }

    /// Every duration slept so far, in order.
    pub fn sleeps(&self) -> Vec<Duration> {
        lock(&self.state).1.clone()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.base + lock(&self.state).0
    }
    fn sleep(&self, duration: Duration) -> BoxFuture<'_, ()> {
        {
            let mut s = lock(&self.state);
            s.0 += duration;
            s.1.push(duration);
        }
        Box::pin(std::future::ready(()))
    }
}

/// A poisoned lock still holds consistent data here (every critical section is a few plain
/// assignments), so keep going rather than fail the run.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// -------------------------------------------------------------------------- circuit breaker

/// The breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CircuitState {
    /// Calls pass.
    Closed,
    /// Calls fast-fail until the recovery timeout has passed.
    Open,
    /// One probe call is let through; its outcome closes or re-opens the breaker.
    HalfOpen,
}

impl CircuitState {
    pub fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::Open => "open",
            CircuitState::HalfOpen => "half_open",
        }
    }
}

/// Whether a call may go to the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The breaker is closed.
    Allowed,
    /// The breaker is half-open and this call is its single probe.
    Probe,
    /// Fast-fail.
    Denied,
}

#[derive(Debug)]
struct Breaker {
    state: CircuitState,
    failures: u32,
    open_until: Option<Instant>,
    probe_in_flight: bool,
}

/// Closed / open / half-open breaker over consecutive failed model calls. Build one per process
/// (or per model) and share it across runs and middleware instances.
pub struct CircuitBreaker {
    settings: CircuitBreakerConfig,
    clock: Arc<dyn Clock>,
    inner: Mutex<Breaker>,
}

impl CircuitBreaker {
    pub fn new(settings: CircuitBreakerConfig) -> Self {
        Self::with_clock(settings, Arc::new(SystemClock))
    }

    pub fn with_clock(settings: CircuitBreakerConfig, clock: Arc<dyn Clock>) -> Self {
        CircuitBreaker {
            settings,
            clock,
            inner: Mutex::new(Breaker {
                state: CircuitState::Closed,
                failures: 0,
                open_until: None,
                probe_in_flight: false,
            }),
        }
    }

    pub fn settings(&self) -> &CircuitBreakerConfig {
        &self.settings
    }

    pub fn state(&self) -> CircuitState {
        lock(&self.inner).state
    }

    pub fn failure_count(&self) -> u32 {
        lock(&self.inner).failures
    }

    /// When an open breaker lets the next probe through.
    pub fn open_until(&self) -> Option<Instant> {
        lock(&self.inner).open_until
    }

    pub fn probe_in_flight(&self) -> bool {
        lock(&self.inner).probe_in_flight
    }

    fn recovery_timeout(&self) -> Duration {
        Duration::try_from_secs_f64(self.settings.recovery_timeout_sec.max(0.0))
            .unwrap_or(Duration::MAX)
    }

    /// Ask to make a call. An open breaker whose timeout has passed turns half-open, and the
    /// first caller then becomes the probe; others fast-fail while it is in flight.
    pub fn admit(&self) -> Admission {
        let now = self.clock.now();
        let mut b = lock(&self.inner);
        if b.state == CircuitState::Open {
            if b.open_until.is_some_and(|until| now < until) {
                return Admission::Denied;
            }
            b.state = CircuitState::HalfOpen;
            b.probe_in_flight = false;
        }
        match b.state {
            CircuitState::HalfOpen if b.probe_in_flight => Admission::Denied,
            CircuitState::HalfOpen => {
                b.probe_in_flight = true;
                Admission::Probe
            }
            CircuitState::Closed | CircuitState::Open => Admission::Allowed,
        }
    }

    /// A call succeeded: close and reset.
    pub fn record_success(&self) {
        let mut b = lock(&self.inner);
        if b.state != CircuitState::Closed || b.failures > 0 {
            tracing::info!("LLM circuit breaker closed: the provider answered again");
        }
        b.state = CircuitState::Closed;
        b.failures = 0;
        b.open_until = None;
        b.probe_in_flight = false;
    }

    /// A call failed for good with a retriable (provider-side) error.
    pub fn record_failure(&self) {
        let until = self.clock.now() + self.recovery_timeout();
        let mut b = lock(&self.inner);
        if b.state == CircuitState::HalfOpen {
            b.state = CircuitState::Open;
            b.open_until = Some(until);
            b.probe_in_flight = false;
            tracing::error!(
                recovery_timeout_sec = self.settings.recovery_timeout_sec,
                "LLM circuit breaker probe failed; open again"
            );
            return;
        }
        b.failures = b.failures.saturating_add(1);
        if b.failures >= self.settings.failure_threshold {
            b.open_until = Some(until);
            if b.state != CircuitState::Open {
                b.state = CircuitState::Open;
                b.probe_in_flight = false;
                tracing::error!(
                    threshold = self.settings.failure_threshold,
                    recovery_timeout_sec = self.settings.recovery_timeout_sec,
                    "LLM circuit breaker opened"
                );
            }
        }
    }

    /// Free a half-open probe without counting its outcome (non-retriable errors, burst-rate
    /// exhaustion, an abandoned call), so the next caller can probe.
    pub fn release_probe(&self) {
        let mut b = lock(&self.inner);
        if b.state == CircuitState::HalfOpen {
            b.probe_in_flight = false;
        }
    }
}

/// Frees the half-open probe when a probing call ends without recording an outcome (including
/// when its future is dropped).
pub(super) struct ProbeGuard<'a> {
    breaker: &'a CircuitBreaker,
    armed: bool,
}

impl<'a> ProbeGuard<'a> {
    /// Holds the breaker's probe slot when `armed`; dropping it unresolved frees the slot.
    pub(super) fn new(breaker: &'a CircuitBreaker, armed: bool) -> Self {
        ProbeGuard { breaker, armed }
    }

    pub(super) fn success(mut self) {
        self.armed = false;
        self.breaker.record_success();
    }

    pub(super) fn failure(mut self) {
        self.armed = false;
        self.breaker.record_failure();
    }

    pub(super) fn release(mut self) {
        self.armed = false;
        self.breaker.release_probe();
    }
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.breaker.release_probe();
        }
    }
}
