//! Background tasks that outlive a panic in one of their rounds.
//!
//! The crate's background loops (the webhook dispatcher, the caches' listener, the known keys'
//! reader, the usage and last-use recorders) each run round after round: a claim, a
//! connection, a read, a flush. A panic in one round (in a host's store, say, or on a row no
//! one foresaw) used to end the loop for good, silently: a replica that delivered no webhook
//! again, caches that never heard of a change. Each round now runs inside [`caught`]: a panic
//! ends that round only, is logged with the task's name (never its payload, which could hold
//! anything), and is counted in `partner_api_background_task_panics_total{task}`; the loop then
//! goes on after its usual pause (each loop already pauses before it tries again after an
//! error, which spaces the rounds of a task that panics every time).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The counter of rounds that panicked, by task: re-exported as
/// [`metrics::BACKGROUND_TASK_PANICS`](crate::metrics::BACKGROUND_TASK_PANICS).
pub(crate) const TASK_PANICS: &str = "partner_api_background_task_panics_total";

pin_project_lite::pin_project! {
    /// `future`, with a panic in any of its polls caught.
    struct CatchUnwind<F> {
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let future = self.project().future;
        // The round's state is dropped after a panic, never polled again: unwind safety is
        // what the round's caller restores by starting a new round.
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// Runs one round of the background task `task`: its output, or `None` when it panicked
/// (logged and counted; the caller treats it as a failed round).
pub(crate) async fn caught<F: Future>(task: &'static str, round: F) -> Option<F::Output> {
    match (CatchUnwind { future: round }).await {
        Ok(output) => Some(output),
        Err(_panic) => {
            tracing::error!(
                task,
                "a partner API background task panicked; the round is dropped and the task goes on"
            );
            ::metrics::counter!(TASK_PANICS, "task" => task).increment(1);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_round_is_none_and_the_next_round_runs() {
        let mut rounds = Vec::new();
        for n in 0..3 {
            rounds.push(
                caught("test", async move {
                    tokio::task::yield_now().await;
                    assert!(n != 1, "round {n} fails");
                    n
                })
                .await,
            );
        }
        assert_eq!(rounds, [Some(0), None, Some(2)]);
    }
}
