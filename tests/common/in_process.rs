//! An `App` served in the test's own process, by any of slidegate's
//! servers (`server::serve`, `rls::serve`, `rlqs::serve`), on a free
//! loopback port: no binary, so a test can hold the `App` (its metrics,
//! its connections) and a manual clock.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use slidegate::server::App;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What a server is told to stop on.
pub type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A server accepting on `addr` until `stop` is sent or dropped (a graceful
/// stop); `task` ends with what the server returned.
pub struct Served<E> {
    pub addr: SocketAddr,
    pub stop: oneshot::Sender<()>,
    pub task: JoinHandle<Result<(), E>>,
}

/// Serve `app` with `serve` on a free loopback port; keep `stop` for as
/// long as it should run.
pub async fn serve<S, F, E>(serve: S, app: Arc<App>) -> Served<E>
where
    S: FnOnce(TcpListener, Arc<App>, Shutdown) -> F,
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: Send + 'static,
{
    let (listener, addr) = listener().await;
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown: Shutdown = Box::pin(async {
        let _ = stopped.await;
    });
    let task = tokio::spawn(serve(listener, app, shutdown));
    Served { addr, stop, task }
}

/// The same, never stopped (it ends with the test's runtime): its address.
pub async fn serve_forever<S, F, E>(serve: S, app: Arc<App>) -> SocketAddr
where
    S: FnOnce(TcpListener, Arc<App>, Shutdown) -> F,
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: Send + 'static,
{
    let (listener, addr) = listener().await;
    tokio::spawn(serve(listener, app, Box::pin(std::future::pending())));
    addr
}

async fn listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}
