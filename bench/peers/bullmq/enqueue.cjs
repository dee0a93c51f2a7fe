// `node enqueue.cjs MODE N BATCH|RATE`: BullMQ's enqueuer on the queue "default".
// MODE "bulk" adds N no-op jobs with `Queue.addBulk`, BATCH per call; "single" one `Queue.add`
// per job; "latency" N latency jobs at RATE per second, each carrying its enqueue time, the i-th
// at start + i/RATE (a late one at once, none early), as the other systems' enqueuers pace them.
// Prints one JSON line, {"jobs": N, "seconds": elapsed}; only the enqueue is timed, after a ping.
"use strict";

const { Queue } = require("bullmq");
const { connection, nowSeconds } = require("./connection.cjs");

// A finished job is removed, as Sidekiq and AsyncTask keep nothing of one (BullMQ keeps all).
const JOB_OPTIONS = { removeOnComplete: true };

async function main() {
  const [mode, countText, size] = process.argv.slice(2);
  const count = Number(countText);
  const queue = new Queue("default", { connection: connection(), defaultJobOptions: JOB_OPTIONS });
  await (await queue.client).ping();
  const start = performance.now();
  if (mode === "bulk") {
    const batch = Number(size);
    for (let done = 0; done < count; done += batch) {
      const jobs = Array.from({ length: Math.min(batch, count - done) }, () => ({ name: "noop", data: {} }));
      await queue.addBulk(jobs);
    }
  } else if (mode === "single") {
    for (let i = 0; i < count; i++) {
      await queue.add("noop", {});
    }
  } else if (mode === "latency") {
    const rate = Number(size);
    for (let i = 0; i < count; i++) {
      const delay = start + (i / rate) * 1000 - performance.now();
      if (delay > 0) {
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
      await queue.add("latency", { sent: nowSeconds() });
    }
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
  const seconds = (performance.now() - start) / 1000;
  console.log(JSON.stringify({ jobs: count, seconds }));
  await queue.close();
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
