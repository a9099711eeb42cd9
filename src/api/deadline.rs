//! [`Deadline`]: a future that gives up after a time, with its timer armed only if it waits.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

pin_project! {
    /// `future`, or `Err(())` once `timeout` has passed. The timer is armed only when the
    /// future first waits, so answers that are ready at once (an in-memory store) never touch
    /// the runtime's timer.
    pub(crate) struct Deadline<F> {
        #[pin]
        future: F,
        timeout: Duration,
        sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<F> Deadline<F> {
    pub(crate) fn new(future: F, timeout: Duration) -> Self {
        Self {
            future,
            timeout,
            sleep: None,
        }
    }
}

impl<F: Future> Future for Deadline<F> {
    type Output = Result<F::Output, ()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        let timeout = *this.timeout;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(())),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_the_timeout_and_not_before() {
        let slow = Deadline::new(
            tokio::time::sleep(Duration::from_secs(5)),
            Duration::from_secs(1),
        );
        assert_eq!(slow.await, Err(()));
        let fast = Deadline::new(
            tokio::time::sleep(Duration::from_millis(10)),
            Duration::from_secs(1),
        );
        assert_eq!(fast.await, Ok(()));
        assert_eq!(Deadline::new(async { 7 }, Duration::ZERO).await, Ok(7));
    }
}
