//! Connection limits of `antler serve`: the header-read deadline that closes slow-loris clients,
//! the cap on concurrent connections, and streams outliving both.

use std::time::Duration;

use antler_server::ServerConfig;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::*;

/// Generous bound on outcomes that must happen; the limits under test are far shorter.
const BOUND: Duration = Duration::from_secs(20);

fn limits(header_read_timeout: Duration, max_connections: u32) -> Options {
    Options {
        config: ServerConfig {
            header_read_timeout,
            max_connections,
            ..Options::default().config
        },
        ..Options::default()
    }
}

fn addr(s: &TestServer) -> String {
    s.base.trim_start_matches("http://").to_owned()
}

/// A client that never reuses a connection the server may have closed as idle.
fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// Everything the server sends until it closes the connection.
/// Over `client`'s own connection: create thread `t1`, then stream a run on it with `body`.
async fn stream_on_new_thread(
    client: &reqwest::Client,
    s: &TestServer,
    body: Value,
) -> reqwest::Response {
    let r = client
        .post(s.url("/api/threads"))
        .json(&json!({"thread_id": "t1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = client
        .post(s.url("/api/threads/t1/runs/stream"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    r
}

async fn read_to_close(r: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn a_slow_loris_client_is_disconnected_after_the_header_timeout() {
    let s = TestServer::start_with(vec![], limits(Duration::from_millis(300), 16)).await;
    let (mut rd, mut wr) = TcpStream::connect(addr(&s)).await.unwrap().into_split();
    wr.write_all(b"GET /api/models HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // One more header byte every 100 ms, never the blank line that ends the headers.
    let drip = tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_millis(100));
        loop {
            interval.tick().await;
            if wr.write_all(b"X").await.is_err() {
                break;
            }
        }
    });
    let sent = tokio::time::timeout(BOUND, read_to_close(&mut rd))
        .await
        .expect("the server kept a connection with unfinished headers open");
    drip.abort();
    assert!(
        !String::from_utf8_lossy(&sent).contains("200 OK"),
        "never answered: {}",
        String::from_utf8_lossy(&sent)
    );
    // Other clients are still served.
    let r = fresh_client()
        .get(s.url("/api/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test]
async fn a_stream_outlasting_the_header_timeout_runs_to_its_end() {
    let mut opts = limits(Duration::from_millis(200), 16);
    opts.open = false;
    opts.config.heartbeat = Duration::from_millis(50);
    let s = TestServer::start_with(vec![ScriptedReply::text("worth the wait")], opts).await;
    let client = fresh_client();
    let r = stream_on_new_thread(&client, &s, json!({"input": say("a")})).await;
    let mut reader = SseReader::new(r);
    // Twenty idle heartbeats 50 ms apart: the stream is open far past the header timeout.
    for _ in 0..20 {
        reader.until(":comment").await;
    }
    s.model.open(1);
    let rest = tokio::time::timeout(BOUND, reader.rest()).await.unwrap();
    assert_eq!(names(&rest).last(), Some(&"end"));
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_for_a_free_slot() {
    let s = TestServer::start_with(vec![], limits(Duration::from_secs(60), 2)).await;
    // Two clients hold both slots (connected first, so accepted first).
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = TcpStream::connect(addr(&s)).await.unwrap();
        c.write_all(b"GET /api/models HTTP/1.1\r\n").await.unwrap();
        held.push(c);
    }
    let mut third = TcpStream::connect(addr(&s)).await.unwrap();
    third
        .write_all(b"GET /api/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    // Not served while the cap is reached (a server without a cap answers at once) …
    let mut first = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(300), third.read(&mut first))
            .await
            .is_err(),
        "a connection beyond the cap was served"
    );
    // … and served as soon as a slot frees up.
    drop(held.pop());
    let reply = tokio::time::timeout(BOUND, read_to_close(&mut third))
        .await
        .expect("the waiting connection was never served");
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

#[tokio::test]
async fn shutdown_ends_live_streams_and_closes_every_connection() {
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let mut opts = limits(Duration::from_secs(60), 4);
    opts.open = false;
    opts.shutdown = Some(stopped);
    let s = TestServer::start_with(vec![ScriptedReply::text("never")], opts).await;
    let client = fresh_client();
    let r = stream_on_new_thread(
        &client,
        &s,
        json!({"input": say("a"), "on_disconnect": "continue"}),
    )
    .await;
    let mut reader = SseReader::new(r);
    reader.until("metadata").await;
    // An idle connection with unfinished headers must not hold the shutdown up for long either.
    let mut idle = TcpStream::connect(addr(&s)).await.unwrap();
    idle.write_all(b"GET /api/models HTTP/1.1\r\n")
        .await
        .unwrap();

    stop.send(()).unwrap();
    let rest = tokio::time::timeout(BOUND, reader.rest()).await.unwrap();
    assert_eq!(names(&rest).last(), Some(&"end"));
    tokio::time::timeout(BOUND, read_to_close(&mut idle))
        .await
        .expect("an idle connection survived the shutdown");
    tokio::time::timeout(BOUND, s.task)
        .await
        .expect("the server did not stop")
        .unwrap();
}
