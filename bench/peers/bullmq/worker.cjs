// `node worker.cjs C`: one BullMQ worker on the queue "default" running C jobs at once.
// A no-op job appends one byte to the BENCH_MARKER file, a latency job one 16-byte record of the
// milliseconds from its enqueue to its start, as every system's jobs do (one write(2) each).
"use strict";

const fs = require("fs");
const { Worker } = require("bullmq");
const { connection, nowSeconds } = require("./connection.cjs");

const marker = process.env.BENCH_MARKER ? fs.openSync(process.env.BENCH_MARKER, "a") : -1;

async function run(job) {
  if (job.name === "latency") {
    const ms = (nowSeconds() - job.data.sent) * 1000;
    fs.writeSync(marker, `${ms.toFixed(6).padStart(15)}\n`);
  } else {
    fs.writeSync(marker, ".");
  }
}

const worker = new Worker("default", run, { connection: connection(), concurrency: Number(process.argv[2]) });
worker.on("error", (error) => console.error(error));

async function stop() {
  await worker.close();
  process.exit(0);
}

process.on("SIGTERM", stop);
process.on("SIGINT", stop);
