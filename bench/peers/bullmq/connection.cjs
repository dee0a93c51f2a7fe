// The bench's Redis for BullMQ (ioredis options), from BENCH_REDIS_URL ("redis://host:port/db").
"use strict";

function connection() {
  const url = new URL(process.env.BENCH_REDIS_URL);
  return {
    host: url.hostname,
    port: Number(url.port || 6379),
    db: Number(url.pathname.slice(1) || 0),
    // BullMQ's workers block on Redis: ioredis must not give up a command after retries.
    maxRetriesPerRequest: null,
  };
}

// Epoch seconds with sub-millisecond precision, the clock both sides of a latency job read.
function nowSeconds() {
  return (performance.timeOrigin + performance.now()) / 1000;
}

module.exports = { connection, nowSeconds };
