//! What the crate's own tests share: the test server.

use std::time::Duration;

/// The test server's URL, or `None` (with the reason printed) when it is
/// absent and `RUNLIMIT_REQUIRE_SERVICES` is not `1`.
pub(crate) fn server(runtime: &tokio::runtime::Runtime) -> Option<String> {
    let url = std::env::var("RUNLIMIT_REDIS_TEST_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
    let reachable = runtime.block_on(async {
        let client = redis::Client::open(url.as_str())?;
        let mut connection = tokio::time::timeout(
            Duration::from_secs(3),
            client.get_multiplexed_async_connection(),
        )
        .await
        .map_err(|_| redis::RedisError::from((redis::ErrorKind::IoError, "timed out")))??;
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
    });
    match reachable {
        Ok(_) => Some(url),
        Err(error) if std::env::var("RUNLIMIT_REQUIRE_SERVICES").as_deref() == Ok("1") => {
            panic!("Redis is required but unreachable at {url}: {error}")
        }
        Err(error) => {
            eprintln!("skipping: Redis unreachable at {url}: {error}");
            None
        }
    }
}
