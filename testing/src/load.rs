//! What the load tests of the listeners need: clients that take their time over a request
//! ([`SlowRequest`]), and the resident memory of a process, now and at its peak
//! ([`resident_bytes`], [`PeakResident`], [`ResidentGrowth`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The most bytes a [`SlowRequest`] writes in one call while it sends its burst.
const CHUNK: usize = 64 * 1024;

/// A request sent the way an attacker holding a server's resources sends it: its head (as
/// given, whole or not), then a burst of filler bytes at once, then one filler byte at a time,
/// until the server answers or closes the connection, or the time is up.
#[derive(Debug, Clone)]
pub struct SlowRequest {
    head: Vec<u8>,
    burst: usize,
    fill: u8,
    every: Duration,
    for_at_most: Duration,
}

/// What a [`SlowRequest`] got back.
#[derive(Debug, Clone, Default)]
pub struct SlowAnswer {
    /// What the server wrote before it closed (or before the client gave up reading).
    pub answer: Vec<u8>,
    /// The server answered or closed before the client stopped sending: it cut the client off.
    pub cut: bool,
    /// The bytes the client managed to hand to the connection, head included.
    pub sent: usize,
}

impl SlowAnswer {
    /// The answer's status code, when there is one.
    pub fn status(&self) -> Option<u16> {
        let answer = String::from_utf8_lossy(&self.answer);
        answer.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
    }
}

impl SlowRequest {
    /// `head` (the request line and headers, whole or in part), no burst, then a space every
    /// 100 ms for at most 10 s.
    pub fn new(head: impl Into<Vec<u8>>) -> Self {
        SlowRequest {
            head: head.into(),
            burst: 0,
            fill: b' ',
            every: Duration::from_millis(100),
            for_at_most: Duration::from_secs(10),
        }
    }

    /// Sends `bytes` filler bytes at once after the head, before dripping.
    pub fn burst(mut self, bytes: usize) -> Self {
        self.burst = bytes;
        self
    }

    /// The filler byte (a space by default).
    pub fn fill(mut self, byte: u8) -> Self {
        self.fill = byte;
        self
    }

    /// How long between two dripped bytes.
    pub fn every(mut self, interval: Duration) -> Self {
        self.every = interval;
        self
    }

    /// How long the client keeps sending at most (the burst included).
    pub fn for_at_most(mut self, limit: Duration) -> Self {
        self.for_at_most = limit;
        self
    }

    /// Sends it to `address` and returns what came back (an empty answer, cut, when the
    /// connection cannot be made).
    pub async fn send(&self, address: SocketAddr) -> SlowAnswer {
        let Ok(stream) = tokio::net::TcpStream::connect(address).await else {
            return SlowAnswer {
                cut: true,
                ..SlowAnswer::default()
            };
        };
        let (mut reader, mut writer) = stream.into_split();
        let reading = tokio::spawn(async move {
            let mut answer = Vec::new();
            let _ = reader.read_to_end(&mut answer).await;
            answer
        });
        let started = Instant::now();
        let mut sent = 0;
        let mut cut = writer.write_all(&self.head).await.is_err();
        if !cut {
            sent += self.head.len();
        }
        let chunk = vec![self.fill; CHUNK.min(self.burst)];
        let mut burst = self.burst;
        while !cut && burst > 0 && started.elapsed() < self.for_at_most {
            let size = burst.min(CHUNK);
            // One `write` at a time: a write that waits (the server does not read) and is
            // given up has written nothing, so `sent` counts what the connection took.
            let wait = self.every.max(Duration::from_millis(100));
            match tokio::time::timeout(wait, writer.write(&chunk[..size])).await {
                Ok(Ok(0) | Err(_)) => cut = true,
                Ok(Ok(written)) => {
                    sent += written;
                    burst -= written;
                }
                Err(_) => {}
            }
            cut |= reading.is_finished();
        }
        while !cut && started.elapsed() < self.for_at_most {
            if reading.is_finished() || writer.write_all(&[self.fill]).await.is_err() {
                cut = true;
                break;
            }
            sent += 1;
            tokio::time::sleep(self.every).await;
        }
        let _ = writer.shutdown().await;
        drop(writer);
        let answer = tokio::time::timeout(Duration::from_secs(5), reading)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        SlowAnswer { answer, cut, sent }
    }
}

/// The resident memory of process `pid` (this process for `None`), in bytes: `VmRSS` of
/// `/proc/<pid>/status`; `None` where there is no such file (not Linux, no such process).
pub fn resident_bytes(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_owned(),
    };
    let status = std::fs::read_to_string(path).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The resident memory of a process before a load, at its peak and after it, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResidentGrowth {
    /// When sampling started.
    pub before: u64,
    /// The most seen while sampling.
    pub peak: u64,
    /// When sampling stopped.
    pub after: u64,
}

impl ResidentGrowth {
    /// How much more memory was resident at the peak than before.
    pub fn growth(&self) -> u64 {
        self.peak.saturating_sub(self.before)
    }
}

impl std::fmt::Display for ResidentGrowth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MIB: u64 = 1024 * 1024;
        write!(
            f,
            "resident {} MiB before, peak {} MiB (+{} MiB), {} MiB after",
            self.before / MIB,
            self.peak / MIB,
            self.growth() / MIB,
            self.after / MIB
        )
    }
}

/// A process's resident memory sampled every 5 ms on a thread of its own, from
/// [`start`](Self::start) to [`stop`](Self::stop).
#[derive(Debug)]
pub struct PeakResident {
    pid: Option<u32>,
    before: u64,
    stop: Arc<AtomicBool>,
    sampler: std::thread::JoinHandle<u64>,
}

impl PeakResident {
    /// Starts sampling process `pid` (this process for `None`).
    pub fn start(pid: Option<u32>) -> Self {
        let before = resident_bytes(pid).unwrap_or(0);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let sampler = std::thread::spawn(move || {
            let mut peak = 0;
            loop {
                peak = peak.max(resident_bytes(pid).unwrap_or(0));
                if stopped.load(Ordering::Acquire) {
                    return peak;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        PeakResident {
            pid,
            before,
            stop,
            sampler,
        }
    }

    /// Stops sampling: the memory resident before, at the peak and now (0 where it could not
    /// be read).
    pub fn stop(self) -> ResidentGrowth {
        self.stop.store(true, Ordering::Release);
        let peak = self.sampler.join().unwrap_or(0);
        ResidentGrowth {
            before: self.before,
            peak: peak.max(self.before),
            after: resident_bytes(self.pid).unwrap_or(0),
        }
    }
}
