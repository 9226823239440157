//! A flood of distinct keys against the README's login layer, in process.
//!
//! The layer is the README's: a per-client limit on the TCP peer (IPv4 /32,
//! IPv6 /64) and a per-account limit on the account the form names, on one
//! [`MemoryStore`] of bounded size. An attacker sends logins that each name a
//! fresh account, from many peers: the store fills with the attacker's keys,
//! and from then on a legitimate user's *new* keys find no room and are
//! answered `503` for as long as the flood goes on, unless the protection is
//! on. Legitimate users arrive from elsewhere at a steady rate, each a new
//! address naming a new account, well within every limit.
//!
//! Requests go through the real router with `tower::ServiceExt::oneshot`; time
//! is a [`ManualClock`] advanced between requests, spreading each window's
//! requests evenly over it, so a run is exact and repeatable whatever the
//! machine's speed. The test asserts on a scaled-down run; the bench and the
//! demo's `--flood` run the README's sizes.

use std::{
    error::Error,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{Router, body::Body, extract::ConnectInfo, routing::post};
use http::{Request, StatusCode};
use runlimit_axum::{BodyField, PeerIp, PeerLimits, RateLimitLayer};
use runlimit_core::{
    AdmissionObservation, FixedWindowPolicy, KeyHasher, Limiter, Observer, PolicyId, ScopeId,
    TieredPolicy,
};
use runlimit_http::draft_11::Advertise;
use runlimit_memory::{
    ManualClock, MemoryStore, MemoryStoreConfig, MemoryStoreStats, OverflowConfig, Tiered,
};
use tower::ServiceExt;

/// The window of every login limit.
pub const WINDOW: Duration = Duration::from_secs(60);
/// The README's per-client limit: logins per peer per window.
pub const PER_CLIENT: u64 = 40;
/// The README's per-account limit: logins per account per window.
pub const PER_ACCOUNT: u64 = 8;
/// The README's aggregate limit of one IPv6 /56 with the protection on.
pub const PER_56: u64 = 200;
/// The README's aggregate limit of one IPv6 /48 with the protection on.
pub const PER_48: u64 = 1_000;

/// The attacking network: every attacking IPv6 peer is in 2001:db8:a77::/48.
const ATTACK_48: u128 = 0x2001_0db8_0a77_u128 << 80;

/// Who floods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// One IPv6 /48 spread over `subnets` of its /64s, each sending
    /// `per_subnet` logins per window.
    Ipv6Prefix {
        /// The /64s in use (65,536 is the whole /48).
        subnets: u32,
        /// Logins per /64 per window.
        per_subnet: u32,
    },
    /// `addresses` unrelated IPv4 addresses, each sending `per_address`
    /// logins per window.
    Ipv4Botnet {
        /// Distinct addresses.
        addresses: u32,
        /// Logins per address per window.
        per_address: u32,
    },
}

impl Attack {
    /// Attacking logins per window.
    #[must_use]
    pub fn per_window(self) -> u64 {
        match self {
            Self::Ipv6Prefix {
                subnets,
                per_subnet,
            } => u64::from(subnets) * u64::from(per_subnet),
            Self::Ipv4Botnet {
                addresses,
                per_address,
            } => u64::from(addresses) * u64::from(per_address),
        }
    }

    /// The peers the attack uses.
    fn peers(self) -> u32 {
        match self {
            Self::Ipv6Prefix { subnets, .. } => subnets,
            Self::Ipv4Botnet { addresses, .. } => addresses,
        }
    }

    /// The `index`th attacking peer.
    fn peer(self, index: u32) -> IpAddr {
        match self {
            // Spread over the /48's /56s first, as a careful attacker would.
            Self::Ipv6Prefix { .. } => {
                let site = u128::from(index % 256);
                let subnet = u128::from(index / 256);
                let address = ATTACK_48 | (site << 72) | (subnet << 64) | 1;
                IpAddr::V6(Ipv6Addr::from(address))
            }
            // 11.0.0.0/8 onwards: unrelated to the legitimate users' ranges.
            Self::Ipv4Botnet { .. } => IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + index)),
        }
    }
}

/// Where the legitimate users come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Newcomers {
    /// Alternately an IPv4 address and an IPv6 /64 of a /48 of its own.
    #[default]
    Mixed,
    /// IPv4 addresses only.
    Ipv4,
    /// IPv6 /64s only, each of a /48 of its own.
    Ipv6,
}

impl Newcomers {
    /// The `index`th legitimate user's address, none near the attack's.
    fn peer(self, index: u32) -> IpAddr {
        let ipv4 = match self {
            Self::Mixed => index.is_multiple_of(2),
            Self::Ipv4 => true,
            Self::Ipv6 => false,
        };
        if ipv4 {
            // 100.64.0.0/10 onwards.
            IpAddr::V4(Ipv4Addr::from(0x6440_0000 + index))
        } else {
            let network = (0x2a00_u128 << 112) | (u128::from(index) << 80);
            IpAddr::V6(Ipv6Addr::from(network | 1))
        }
    }
}

/// Which protection the layer and store have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Protection {
    /// IPv6 peers are also checked per /56 and per /48 ([`Flood::per_56`],
    /// [`Flood::per_48`]).
    pub escalation: bool,
    /// The store decides keys that find their shard full in an overflow
    /// sketch of [`Flood::overflow`]'s size.
    pub overflow: bool,
}

impl Protection {
    /// No protection: the README's layer as it was.
    pub const OFF: Self = Self {
        escalation: false,
        overflow: false,
    };
    /// Every protection on.
    pub const ON: Self = Self {
        escalation: true,
        overflow: true,
    };
}

/// One flood: who attacks, how large the store is, who else logs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flood {
    /// The attack.
    pub attack: Attack,
    /// The store's `max_keys`.
    pub max_keys: usize,
    /// The store's shards.
    pub shards: usize,
    /// The overflow sketch's width and depth, when the protection has one.
    pub overflow: (usize, usize),
    /// The /56 level's limit per window, when the protection has levels.
    pub per_56: u64,
    /// The /48 level's limit per window, when the protection has levels.
    pub per_48: u64,
    /// New legitimate users per window, each one login.
    pub legitimate_per_window: u32,
    /// Where they come from.
    pub newcomers: Newcomers,
    /// Windows the flood lasts.
    pub windows: u32,
    /// The protection on.
    pub protection: Protection,
}

impl Flood {
    /// The README's store (50,000 keys in 64 shards) against a whole IPv6 /48
    /// sending 40 logins per /64 per minute, 1,000 new users a minute beside it.
    #[must_use]
    pub fn readme_ipv6() -> Self {
        Self {
            attack: Attack::Ipv6Prefix {
                subnets: 65_536,
                per_subnet: 40,
            },
            max_keys: 50_000,
            shards: 64,
            overflow: (1 << 20, 4),
            per_56: PER_56,
            per_48: PER_48,
            legitimate_per_window: 1_000,
            newcomers: Newcomers::Mixed,
            windows: 2,
            protection: Protection::OFF,
        }
    }

    /// The README's store against 50,000 IPv4 addresses sending 10 logins
    /// each per minute (550,000 distinct keys a minute, eleven times the
    /// store's), 1,000 new users a minute beside it.
    #[must_use]
    pub fn readme_ipv4() -> Self {
        Self {
            attack: Attack::Ipv4Botnet {
                addresses: 50_000,
                per_address: 10,
            },
            ..Self::readme_ipv6()
        }
    }

    /// The same flood with `protection`.
    #[must_use]
    pub fn with_protection(self, protection: Protection) -> Self {
        Self { protection, ..self }
    }

    /// Distinct keys the attack brings per window: one per peer, one per
    /// account named.
    #[must_use]
    pub fn attack_keys_per_window(&self) -> u64 {
        u64::from(self.attack.peers()) + self.attack.per_window()
    }

    /// Runs the flood and reports what each side got.
    ///
    /// # Errors
    ///
    /// When a policy, the hasher or the store refuses its configuration, or
    /// a request cannot be built.
    pub async fn run(&self) -> Result<Report, Box<dyn Error + Send + Sync>> {
        let clock = ManualClock::new();
        let store = Arc::new(MemoryStore::new(self.store_config()?).with_clock(clock.clone()));
        let hasher = KeyHasher::new(SECRET)?;
        let app = login_router(
            &hasher,
            Arc::clone(&store),
            self,
            |policy| policy,
            |policy| policy,
        )?;
        let mut report = self.drive(&app, &clock, || store.stats()).await?;
        report.capacity = self.max_keys;
        Ok(report)
    }

    /// Runs the flood against the production topology: a [`Tiered`] limiter
    /// whose memory gate (the store [`run`](Self::run) uses, with its
    /// protection) holds the per-client limit and the network levels, in
    /// front of a shared store holding the per-account limit (a memory store
    /// standing in for PostgreSQL or Redis). A request the gate refuses never
    /// reaches the shared store, so [`Report::shared_checks`] counts every
    /// check that could write a row there.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    pub async fn run_tiered(&self) -> Result<Report, Box<dyn Error + Send + Sync>> {
        let clock = ManualClock::new();
        let gate = MemoryStore::new(self.store_config()?).with_clock(clock.clone());
        // Room for every key the run could bring, so the stand-in never
        // refuses one and its count is the shared store's whole work.
        let room = usize::try_from(
            (self.attack_keys_per_window() + u64::from(self.legitimate_per_window))
                * u64::from(self.windows),
        )?;
        let shared_checks = Arc::new(AtomicU64::new(0));
        let shared = MemoryStore::new(MemoryStoreConfig::new(room.max(1))?)
            .with_clock(clock.clone())
            .with_observer(SharedChecks(Arc::clone(&shared_checks)));
        let limiter = Arc::new(Tiered::new(gate, shared));
        let hasher = KeyHasher::new(SECRET)?;
        let app = login_router(
            &hasher,
            Arc::clone(&limiter),
            self,
            TieredPolicy::Gate,
            TieredPolicy::Shared,
        )?;
        let mut report = self.drive(&app, &clock, || limiter.gate().stats()).await?;
        report.capacity = self.max_keys;
        report.shared_checks = shared_checks.load(Ordering::Relaxed);
        Ok(report)
    }

    /// The bounded store's configuration, with the overflow tier when the
    /// protection has it.
    fn store_config(&self) -> Result<MemoryStoreConfig, Box<dyn Error + Send + Sync>> {
        let mut config = MemoryStoreConfig::new(self.max_keys)?.with_shard_count(self.shards)?;
        if self.protection.overflow {
            let (width, depth) = self.overflow;
            config = config.with_overflow(OverflowConfig::new(width, depth)?);
        }
        Ok(config)
    }

    /// Sends the flood and the legitimate logins through `app`, advancing
    /// `clock`; `stats` reads the bounded store.
    async fn drive(
        &self,
        app: &Router,
        clock: &ManualClock,
        stats: impl Fn() -> MemoryStoreStats,
    ) -> Result<Report, Box<dyn Error + Send + Sync>> {
        let attacks = self.attack.per_window();
        let legitimate = u64::from(self.legitimate_per_window);
        let per_window = attacks + legitimate;
        // One legitimate login every `spacing` requests, spread over the window.
        let spacing = per_window / legitimate.max(1);
        let step = WINDOW / u32::try_from(per_window).unwrap_or(u32::MAX);
        let mut report = Report::default();
        let mut user = 0_u32;
        let mut account = 0_u64;
        let started = Instant::now();
        for _ in 0..self.windows {
            let mut legitimate_sent = 0;
            let mut attacking = 0_u64;
            for slot in 0..per_window {
                clock.advance(step);
                let legitimate_turn = legitimate_sent < legitimate
                    && (slot % spacing == spacing - 1 || attacking == attacks);
                if legitimate_turn {
                    legitimate_sent += 1;
                    let status =
                        login(app, self.newcomers.peer(user), &format!("user-{user}")).await?;
                    user += 1;
                    report.legitimate.count(status);
                } else {
                    // Round robin over the peers: each sends at an even rate.
                    let peer = self.attack.peer(
                        u32::try_from(attacking % u64::from(self.attack.peers())).unwrap_or(0),
                    );
                    attacking += 1;
                    account += 1;
                    let status = login(app, peer, &format!("victim-{account}")).await?;
                    report.attack.count(status);
                }
                if slot.is_multiple_of(4_096) {
                    report.peak_keys = report.peak_keys.max(stats().entries);
                }
            }
        }
        report.elapsed = started.elapsed();
        let stats = stats();
        report.peak_keys = report.peak_keys.max(stats.entries);
        report.overflow_bytes = stats.overflow.map_or(0, |overflow| overflow.bytes);
        Ok(report)
    }
}

/// The scenario's key secret.
const SECRET: &[u8] = b"the flood scenario's secret, 32 bytes or more";

/// Counts the checks that reach the shared store.
#[derive(Debug)]
struct SharedChecks(Arc<AtomicU64>);

impl Observer for SharedChecks {
    fn on_admission(&self, observation: &AdmissionObservation<'_>) {
        let checks = u64::try_from(observation.batch_size()).unwrap_or(u64::MAX);
        self.0.fetch_add(checks, Ordering::Relaxed);
    }
}

/// The README's login route: per client, per account, on `limiter`, with
/// the network levels when the flood's protection has them; `gate` and
/// `shared` make the per-client (and network) and the per-account policies
/// of the limiter's policy type.
fn login_router<L>(
    hasher: &KeyHasher,
    limiter: Arc<L>,
    flood: &Flood,
    gate: impl Fn(FixedWindowPolicy) -> L::Policy,
    shared: impl Fn(FixedWindowPolicy) -> L::Policy,
) -> Result<Router, Box<dyn Error + Send + Sync>>
where
    L: Limiter + Send + Sync + 'static,
    L::Policy: Advertise + Send + Sync + 'static,
    L::Error: Send + Sync + 'static,
{
    let login = PolicyId::new("auth.login")?;
    let per_client =
        FixedWindowPolicy::new(login.clone(), ScopeId::new("client")?, PER_CLIENT, WINDOW)?;
    let per_account = FixedWindowPolicy::new(
        login.clone(),
        ScopeId::new("identity")?,
        PER_ACCOUNT,
        WINDOW,
    )?;
    let mut peers = PeerLimits::new(gate(per_client), PeerIp::new(hasher));
    if flood.protection.escalation {
        let per_56 = FixedWindowPolicy::new(
            login.clone(),
            ScopeId::new("client.56")?,
            flood.per_56,
            WINDOW,
        )?;
        let per_48 =
            FixedWindowPolicy::new(login, ScopeId::new("client.48")?, flood.per_48, WINDOW)?;
        peers = peers
            .with_ipv6_network(56, gate(per_56))?
            .with_ipv6_network(48, gate(per_48))?;
    }
    let layer = RateLimitLayer::from_shared(limiter)
        .check_peer(peers)
        .check(
            shared(per_account),
            BodyField::form(hasher, "account").normalize(|v| v.trim().to_lowercase()),
        )
        .withhold_fields()
        .key_reads_body(4_096);
    Ok(Router::new().route("/login", post(|| async { "welcome" }).route_layer(layer)))
}

/// One login from `peer` naming `account`; its status.
async fn login(
    app: &Router,
    peer: IpAddr,
    account: &str,
) -> Result<StatusCode, Box<dyn Error + Send + Sync>> {
    let mut request = Request::post("/login")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("account={account}&password=guess")))?;
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::new(peer, 40_000)));
    let response = app.clone().oneshot(request).await?;
    Ok(response.status())
}

/// What one side's logins got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcomes {
    /// Logins sent.
    pub sent: u64,
    /// Answered `200`.
    pub admitted: u64,
    /// Answered `429`: a limit was spent.
    pub limited: u64,
    /// Answered `503`: the store had no room for a new key.
    pub at_capacity: u64,
    /// Answered anything else (never, unless the scenario is broken).
    pub other: u64,
}

impl Outcomes {
    fn count(&mut self, status: StatusCode) {
        self.sent += 1;
        match status {
            StatusCode::OK => self.admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => self.limited += 1,
            StatusCode::SERVICE_UNAVAILABLE => self.at_capacity += 1,
            _ => self.other += 1,
        }
    }

    /// The share of logins admitted, from 0 to 1.
    #[must_use]
    #[expect(clippy::cast_precision_loss, reason = "a ratio for a report")]
    pub fn admitted_share(&self) -> f64 {
        if self.sent == 0 {
            return 1.0;
        }
        self.admitted as f64 / self.sent as f64
    }
}

/// What a flood did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The legitimate users' logins.
    pub legitimate: Outcomes,
    /// The attacker's logins.
    pub attack: Outcomes,
    /// The most keys the store held at once (sampled).
    pub peak_keys: usize,
    /// The store's `max_keys`.
    pub capacity: usize,
    /// The bytes the store's overflow sketches take (none without the tier).
    pub overflow_bytes: usize,
    /// Wall time of the whole run (the bench's number; never asserted).
    pub elapsed: Duration,
    /// With [`Flood::run_tiered`], the checks that reached the shared store
    /// (each could write a row there); otherwise 0.
    pub shared_checks: u64,
}

impl Report {
    /// Wall time per login, every side counted.
    #[must_use]
    pub fn per_login(&self) -> Duration {
        let logins = self.legitimate.sent + self.attack.sent;
        self.elapsed / u32::try_from(logins.max(1)).unwrap_or(u32::MAX)
    }

    /// The store's resident bound in bytes: its `max_keys` at the 100 bytes
    /// per key `runlimit-memory` documents as the most a key costs, and its
    /// overflow sketches.
    #[must_use]
    pub fn store_bound_bytes(&self) -> usize {
        self.capacity * 100 + self.overflow_bytes
    }
}
