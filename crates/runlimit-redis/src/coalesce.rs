//! Natural batching of concurrent admissions into one script invocation.
//!
//! Redis runs scripts one at a time, and what a script invocation costs the
//! server (parsing the command, calling into Lua, building the reply) is a
//! large part of what a check costs. So checks issued while their group's
//! invocations are in flight wait for one to finish and are then sent
//! together, as *members* of one invocation that decides each of them on its
//! own (all-or-nothing within the member, exactly as if it were sent alone)
//! against one reading of the clock. Nothing waits on purpose: a check with
//! room in flight ahead of it is sent at once, alone, with the same script
//! as without coalescing; a queue forms only while the server is busy.
//!
//! Members are grouped by hash slot (on a single server everything is one
//! group), since a script's keys must share a slot on a cluster.
//!
//! A group sends up to a few invocations at once (keeping the connection's
//! pipeline busy) before later checks queue. The work stays on the callers'
//! tasks. A caller that finds fewer invocations in flight than that *leads*:
//! it sends its member (with any it carries), answers the members it
//! carried, and hands its place to the first caller still waiting in the
//! queue, together with as many queued members as one invocation takes, or
//! gives the place up. Between answering and handing on it yields to the
//! runtime once, so that callers it answered which check again at once
//! (a busy service's do) join the next invocation rather than the one
//! after: invocations stay fuller, and the other in flight keeps the server
//! busy meanwhile. A leader's drop guard answers and hands on, so a leader
//! whose future is dropped (yielding, too) never stalls its group; the
//! members it was carrying then fail with a "may have consumed" error, as an
//! abandoned single check would.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use tokio::sync::oneshot;

use crate::error::{CheckError, duplicate};

/// One member's keys and arguments, as a lone invocation would send them.
pub(crate) struct Member {
    pub(crate) keys: Vec<String>,
    pub(crate) arguments: Vec<i64>,
}

/// What a queued caller is told.
enum Message {
    /// Its reply, or the invocation's error.
    Decided(Result<Vec<i64>, CheckError>),
    /// It leads now: its own member back, and the members it carries.
    Lead { own: Member, carried: Vec<Queued> },
}

/// A member waiting for an invocation to take it.
struct Queued {
    member: Member,
    reply: oneshot::Sender<Message>,
}

#[derive(Default)]
struct Group {
    /// Invocations being sent (or about to be).
    in_flight: usize,
    queue: Vec<Queued>,
}

/// The coalescing state of one limiter, shared by its clones.
pub(crate) struct Coalescer {
    groups: Mutex<HashMap<u16, Group>>,
    max_members: usize,
    max_in_flight: usize,
}

impl std::fmt::Debug for Coalescer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("max_members", &self.max_members)
            .finish_non_exhaustive()
    }
}

/// Answers what a leader carries and hands its leadership on when the leader
/// is done, or when its future is dropped.
struct Leadership<'a> {
    coalescer: &'a Coalescer,
    slot: u16,
    carried: Vec<oneshot::Sender<Message>>,
}

impl Drop for Leadership<'_> {
    fn drop(&mut self) {
        // Members not answered yet were carried by an invocation that may
        // have been sent.
        for reply in self.carried.drain(..) {
            let _ = reply.send(Message::Decided(Err(CheckError::OperationTimeout)));
        }
        self.coalescer.hand_on(self.slot);
    }
}

impl Coalescer {
    /// Coalescing at most `max_members` members per invocation.
    pub(crate) fn new(max_members: usize, max_in_flight: usize) -> Self {
        Self {
            groups: Mutex::new(HashMap::new()),
            max_members: max_members.max(1),
            max_in_flight: max_in_flight.max(1),
        }
    }

    fn groups(&self) -> MutexGuard<'_, HashMap<u16, Group>> {
        // Plain bookkeeping that no panic can leave half-done.
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Passes the group's leadership to its first queued caller still
    /// waiting, with as many other members as one invocation takes, or marks
    /// the group idle.
    fn hand_on(&self, slot: u16) {
        let mut groups = self.groups();
        let Some(group) = groups.get_mut(&slot) else {
            return;
        };
        // Callers that gave up are not sent.
        group.queue.retain(|queued| !queued.reply.is_closed());
        while !group.queue.is_empty() {
            let take = group.queue.len().min(self.max_members);
            let mut next: Vec<Queued> = group.queue.drain(..take).collect();
            let leader = next.remove(0);
            match leader.reply.send(Message::Lead {
                own: leader.member,
                carried: next,
            }) {
                Ok(()) => return,
                // That caller gave up just now: the others go back to the
                // front of the queue, for the next in line.
                Err(Message::Lead { carried, .. }) => {
                    let rest = std::mem::replace(&mut group.queue, carried);
                    group.queue.extend(rest);
                }
                Err(Message::Decided(_)) => {}
            }
        }
        group.in_flight -= 1;
    }

    /// Decides `member` of group `slot`: at once if the group is idle, else
    /// with the members queued behind the invocation in flight, waiting at
    /// most `timeout` for one to take it. `send` runs one invocation and
    /// returns one reply per member, in order.
    pub(crate) async fn decide(
        &self,
        slot: u16,
        member: Member,
        timeout: Duration,
        send: impl AsyncFnOnce(Vec<Member>) -> Result<Vec<Vec<i64>>, CheckError>,
    ) -> Result<Vec<i64>, CheckError> {
        let waiting = {
            let mut groups = self.groups();
            let group = groups.entry(slot).or_default();
            if group.in_flight >= self.max_in_flight {
                let (reply, answer) = oneshot::channel();
                group.queue.push(Queued { member, reply });
                Err(answer)
            } else {
                group.in_flight += 1;
                Ok(member)
            }
        };
        let (own, carried) = match waiting {
            Ok(member) => (member, Vec::new()),
            Err(answer) => match tokio::time::timeout(timeout, answer).await {
                Ok(Ok(Message::Decided(result))) => return result,
                Ok(Ok(Message::Lead { own, carried })) => (own, carried),
                // No invocation took it in time; it may still be taken (and
                // sent) before the closed channel is noticed.
                Err(_) | Ok(Err(_)) => return Err(CheckError::OperationTimeout),
            },
        };
        let (members, replies): (Vec<Member>, Vec<_>) = carried
            .into_iter()
            .map(|queued| (queued.member, queued.reply))
            .unzip();
        let mut leadership = Leadership {
            coalescer: self,
            slot,
            carried: replies,
        };
        let count = 1 + members.len();
        let mut all = Vec::with_capacity(count);
        all.push(own);
        all.extend(members);
        let result = send(all).await;
        match result {
            Ok(mut replies) if replies.len() == count => {
                let mine = replies.remove(0);
                let carried_any = !leadership.carried.is_empty();
                for (reply, decided) in leadership.carried.drain(..).zip(replies) {
                    let _ = reply.send(Message::Decided(Ok(decided)));
                }
                if carried_any {
                    // The callers just answered mostly check again at once:
                    // letting them run first puts them in the next invocation
                    // with those already queued, rather than in the one after.
                    // Fuller invocations cost the server less per check (at 32
                    // tasks, about 15 members rather than 10; BENCHMARKS.md has
                    // the server time), and the invocation still in flight
                    // keeps the server busy meanwhile.
                    tokio::task::yield_now().await;
                }
                Ok(mine)
            }
            Ok(_) => {
                for reply in leadership.carried.drain(..) {
                    let _ = reply.send(Message::Decided(Err(CheckError::UnexpectedReply)));
                }
                Err(CheckError::UnexpectedReply)
            }
            Err(error) => {
                for reply in leadership.carried.drain(..) {
                    let _ = reply.send(Message::Decided(Err(duplicate(&error))));
                }
                Err(error)
            }
        }
        // `leadership` hands on as it drops.
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use tokio::sync::Notify;

    use super::*;

    fn member(n: i64) -> Member {
        Member {
            keys: vec![format!("k{n}")],
            arguments: vec![n],
        }
    }

    /// Invocations sent, and their sizes, with the first held until released.
    #[derive(Default)]
    struct Server {
        sizes: Mutex<Vec<usize>>,
        release: Notify,
        held: AtomicUsize,
    }

    impl Server {
        /// Replies to each member with its own argument, doubled.
        async fn send(&self, members: Vec<Member>) -> Result<Vec<Vec<i64>>, CheckError> {
            self.sizes.lock().expect("lock").push(members.len());
            if self.held.fetch_add(1, Ordering::SeqCst) == 0 {
                self.release.notified().await;
            }
            Ok(members.iter().map(|m| vec![m.arguments[0] * 2]).collect())
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn checks_queued_behind_an_invocation_share_the_next_and_get_their_own_replies() {
        let coalescer = Arc::new(Coalescer::new(8, 1));
        let server = Arc::new(Server::default());
        let first = {
            let (coalescer, server) = (Arc::clone(&coalescer), Arc::clone(&server));
            tokio::spawn(async move {
                coalescer
                    .decide(0, member(1), Duration::from_secs(5), async |m| {
                        server.send(m).await
                    })
                    .await
            })
        };
        tokio::task::yield_now().await;
        let queued: Vec<_> = (2..=11)
            .map(|n| {
                let (coalescer, server) = (Arc::clone(&coalescer), Arc::clone(&server));
                tokio::spawn(async move {
                    coalescer
                        .decide(0, member(n), Duration::from_secs(5), async |m| {
                            server.send(m).await
                        })
                        .await
                })
            })
            .collect();
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        server.release.notify_one();
        assert_eq!(first.await.expect("task").expect("ok"), vec![2]);
        for (n, task) in (2..=11).zip(queued) {
            assert_eq!(task.await.expect("task").expect("ok"), vec![n * 2]);
        }
        // The lone first check went alone; the ten behind it in two
        // invocations of at most eight.
        assert_eq!(*server.sizes.lock().expect("lock"), [1, 8, 2]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_invocations_error_reaches_every_member_with_its_classification() {
        let coalescer = Arc::new(Coalescer::new(8, 1));
        let release = Arc::new(Notify::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let send = {
            let (release, calls) = (Arc::clone(&release), Arc::clone(&calls));
            move |members: Vec<Member>| {
                let (release, calls) = (Arc::clone(&release), Arc::clone(&calls));
                async move {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        release.notified().await;
                        Ok(members.iter().map(|_| vec![0]).collect())
                    } else {
                        Err(CheckError::OperationTimeout)
                    }
                }
            }
        };
        let tasks: Vec<_> = (0..4)
            .map(|n| {
                let (coalescer, send) = (Arc::clone(&coalescer), send.clone());
                tokio::spawn(async move {
                    coalescer
                        .decide(0, member(n), Duration::from_secs(5), async |m| {
                            send(m).await
                        })
                        .await
                })
            })
            .collect();
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        release.notify_one();
        let results: Vec<_> = futures_join(tasks).await;
        assert!(results[0].is_ok());
        for result in &results[1..] {
            let error = result.as_ref().expect_err("the shared failure");
            assert!(error.may_have_consumed_quota());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_dropped_leader_hands_its_place_on() {
        let coalescer = Arc::new(Coalescer::new(8, 1));
        let stalled = {
            let coalescer = Arc::clone(&coalescer);
            tokio::spawn(async move {
                coalescer
                    .decide(0, member(1), Duration::from_secs(5), async |_| {
                        std::future::pending().await
                    })
                    .await
            })
        };
        tokio::task::yield_now().await;
        let behind = {
            let coalescer = Arc::clone(&coalescer);
            tokio::spawn(async move {
                coalescer
                    .decide(0, member(2), Duration::from_secs(5), async |m| {
                        Ok(m.iter().map(|m| m.arguments.clone()).collect())
                    })
                    .await
            })
        };
        tokio::task::yield_now().await;
        stalled.abort();
        assert_eq!(behind.await.expect("task").expect("ok"), vec![2]);
        // And the group is idle again: a new check goes at once.
        let next = coalescer
            .decide(0, member(3), Duration::from_secs(5), async |m| {
                Ok(m.iter().map(|m| m.arguments.clone()).collect())
            })
            .await;
        assert_eq!(next.expect("ok"), vec![3]);
    }

    /// Every invocation held until the test releases it.
    #[derive(Default)]
    struct HeldServer {
        sizes: Mutex<Vec<usize>>,
        release: Notify,
    }

    impl HeldServer {
        async fn send(&self, members: Vec<Member>) -> Result<Vec<Vec<i64>>, CheckError> {
            self.sizes.lock().expect("lock").push(members.len());
            self.release.notified().await;
            Ok(members.iter().map(|m| m.arguments.clone()).collect())
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_caller_answered_by_an_invocation_that_checks_again_joins_the_next_one() {
        let coalescer = Arc::new(Coalescer::new(8, 1));
        let server = Arc::new(HeldServer::default());
        let spawn = |numbers: Vec<i64>| {
            let (coalescer, server) = (Arc::clone(&coalescer), Arc::clone(&server));
            tokio::spawn(async move {
                let mut replies = Vec::new();
                for n in numbers {
                    let reply = coalescer
                        .decide(0, member(n), Duration::from_secs(5), async |m| {
                            server.send(m).await
                        })
                        .await
                        .expect("ok");
                    replies.push(reply);
                }
                replies
            })
        };
        let settle = async || {
            for _ in 0..8 {
                tokio::task::yield_now().await;
            }
        };
        // 1 goes alone; 2 and 3 queue behind it and go together.
        let first = spawn(vec![1]);
        settle().await;
        let (second, third) = (spawn(vec![2]), spawn(vec![3, 13]));
        settle().await;
        server.release.notify_one();
        settle().await;
        // 4 queues behind [2, 3]. When that is answered, 3 checks again (13)
        // and goes in the next invocation with 4, not in one after it.
        let fourth = spawn(vec![4]);
        settle().await;
        server.release.notify_one();
        settle().await;
        assert_eq!(*server.sizes.lock().expect("lock"), [1, 2, 2]);
        server.release.notify_one();
        settle().await;
        assert_eq!(first.await.expect("task"), [vec![1]]);
        assert_eq!(second.await.expect("task"), [vec![2]]);
        assert_eq!(third.await.expect("task"), [vec![3], vec![13]]);
        assert_eq!(fourth.await.expect("task"), [vec![4]]);
    }

    async fn futures_join<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.expect("task"));
        }
        results
    }
}
