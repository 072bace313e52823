//! A TCP proxy in front of memcached that counts round trips: a round trip
//! starts when a client sends after its last answer (or first sends at all).
//! Bytes sent while an answer is still awaited (a pipelined batch arriving in
//! pieces) belong to the same round trip. This measures from outside what
//! the store claims, without trusting its own counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct CountingProxy {
    pub addr: String,
    round_trips: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingProxy {
    pub async fn start(upstream: String) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let round_trips = Arc::new(AtomicU64::new(0));
        let counter = round_trips.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                tokio::spawn(relay(client, server, counter.clone()));
            }
        });
        CountingProxy {
            addr,
            round_trips,
            task,
        }
    }

    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::SeqCst)
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(client: TcpStream, server: TcpStream, round_trips: Arc<AtomicU64>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let awaiting = Arc::new(AtomicBool::new(false));
    let awaiting_answer = awaiting.clone();
    let upstream = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = match client_read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            if !awaiting.swap(true, Ordering::SeqCst) {
                round_trips.fetch_add(1, Ordering::SeqCst);
            }
            if server_write.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        let _ = server_write.shutdown().await;
    };
    let downstream = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = match server_read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            // Cleared before the client can see the answer, so its next
            // request always starts a new round trip.
            awaiting_answer.store(false, Ordering::SeqCst);
            if client_write.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::join!(upstream, downstream);
}
