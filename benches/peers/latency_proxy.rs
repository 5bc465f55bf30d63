//! A TCP proxy on 127.0.0.1 that delays every byte from the client to the server by a fixed time,
//! so that each HTTP request reaches the server that much later (the `tc netem` of a machine
//! without netem): the object-storage benchmark's added per-request latency. Answers flow back
//! undelayed; throughput is not limited, only shifted in time. Standard library only.
//!
//! ```text
//! cargo run --release --example latency_proxy -- UPSTREAM_PORT DELAY_MS
//! ```
//!
//! Prints `port PORT` once it listens, then serves until killed.
//!
//! The proxy acknowledges the server's bytes at once (`TCP_QUICKACK`, re-armed before every
//! read): a server that writes an answer's head and body apart without `TCP_NODELAY` (s3s-fs)
//! would otherwise stall each answer for the 40 ms of Linux's delayed acknowledgement, and that
//! stall, not the added latency, would be measured.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || std::io::Error::other("usage: latency_proxy UPSTREAM_PORT DELAY_MS");
    let upstream: u16 = args.first().and_then(|p| p.parse().ok()).ok_or_else(usage)?;
    let delay = Duration::from_secs_f64(args.get(1).and_then(|d| d.parse::<f64>().ok()).ok_or_else(usage)? / 1e3);
    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("port {}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        std::thread::spawn(move || {
            if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) {
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                relay(client, server, delay);
            }
        });
    }
    Ok(())
}

/// Client bytes go to the server `delay` after they arrived; server bytes go back at once.
fn relay(client: TcpStream, server: TcpStream, delay: Duration) {
    let (Ok(mut from_client), Ok(mut to_server)) = (client.try_clone(), server.try_clone()) else { return };
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n) = from_client.read(&mut buf) {
            if n == 0 || tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    let writer = std::thread::spawn(move || {
        for (arrived, bytes) in rx {
            std::thread::sleep((arrived + delay).saturating_duration_since(Instant::now()));
            if to_server.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = to_server.shutdown(Shutdown::Write);
    });
    let (from_server, mut to_client) = (server, client);
    let quick = socket2::SockRef::from(&from_server);
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let _ = quick.set_tcp_quickack(true);
        match (&from_server).read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) if to_client.write_all(&buf[..n]).is_err() => break,
            Ok(_) => {}
        }
    }
    let _ = to_client.shutdown(Shutdown::Both);
    let _ = reader.join();
    let _ = writer.join();
}
