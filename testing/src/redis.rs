//! A real `redis-server` for tests: started on a free port of 127.0.0.1 without persistence,
//! killed when dropped.

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
    /// When the server started but does not answer within 10 s.
    pub fn start() -> Option<RedisServer> {
        RedisServer::start_with(&[])
    }

    /// [`start`](Self::start) with `extra` arguments (`--requirepass`, TLS); a server
    /// started with any is waited for by its port (it may refuse an unauthenticated `PING`).
    ///
    /// # Panics
    /// When the server started but is not ready within 10 s.
    pub fn start_with(extra: &[&str]) -> Option<RedisServer> {
        let port = TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
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
                eprintln!(
                    "skipped: cannot start redis-server ({error}); install it (.ci/run does)"
                );
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
