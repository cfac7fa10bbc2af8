//! A real `redis-server` for tests: started on a free port of 127.0.0.1 without persistence,
//! killed when dropped. A test that cannot start one skips, unless `PORTCULLIS_REQUIRE_REDIS`
//! is set (to anything but `0`: the test command sets it), which fails it instead.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process of the test that started it.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    /// Starts one and waits until it answers `PING`; `None` (with a line saying why on
    /// standard error) when `redis-server` cannot be started, so a test can skip.
    ///
    /// # Panics
    /// When the server started but does not answer within 10 s, or when it cannot be started
    /// and `PORTCULLIS_REQUIRE_REDIS` is set ([`unavailable`]).
    pub fn start() -> Option<RedisServer> {
        RedisServer::start_with(&[])
    }

    /// [`start`](Self::start) with `extra` arguments (`--requirepass`, TLS); a server
    /// started with any is waited for by its port (it may refuse an unauthenticated `PING`).
    ///
    /// # Panics
    /// When the server started but is not ready within 10 s, or when it cannot be started
    /// and `PORTCULLIS_REQUIRE_REDIS` is set ([`unavailable`]).
    pub fn start_with(extra: &[&str]) -> Option<RedisServer> {
        let port = match TcpListener::bind("127.0.0.1:0").and_then(|free| free.local_addr()) {
            Ok(address) => address.port(),
            Err(error) => {
                unavailable(&format!("no free port on 127.0.0.1 ({error})"));
                return None;
            }
        };
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(error) => {
                unavailable(&format!(
                    "cannot start redis-server ({error}); install it (scripts/test does)"
                ));
                return None;
            }
        };
        let server = RedisServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if server.ping() || (!extra.is_empty() && server.listening()) {
                return Some(server);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        #[allow(clippy::panic)]
        {
            panic!("redis-server did not answer within 10 s");
        }
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id (to send it signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it accepts connections.
    pub fn listening(&self) -> bool {
        TcpStream::connect(("127.0.0.1", self.port)).is_ok()
    }

    /// Whether it answers `PING` with `PONG`.
    pub fn ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        let mut answer = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut answer).is_ok()
            && &answer == b"+PONG\r\n"
    }

    /// Kills it and waits for it to exit.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A paused server must be resumed to die promptly.
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        self.stop();
    }
}

/// Says that a Redis test cannot run because of `why` (no `redis-server`, no `openssl` to
/// make its TLS certificates): the test is skipped with a line on standard error, or fails
/// when `PORTCULLIS_REQUIRE_REDIS` is set.
///
/// # Panics
/// When `PORTCULLIS_REQUIRE_REDIS` is set.
pub fn unavailable(why: &str) {
    crate::skip("PORTCULLIS_REQUIRE_REDIS", why);
}
