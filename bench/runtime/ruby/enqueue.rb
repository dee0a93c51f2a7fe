# frozen_string_literal: true

# Ruby side of the enqueue measurement: `ruby enqueue.rb MODE N BATCH|RATE` with REDIS_URL set.
#
# MODE "bulk" calls Sidekiq::Client.push_bulk with BATCH jobs per call, "single" calls
# NoopWorker.perform_async N times, "latency" calls LatencyWorker.perform_async(Time.now.to_f)
# N times at RATE per second, paced as bench/peers/pacing.py's `paced` does: the i-th at
# start + i/RATE, a late one at once, none early.
# Prints one JSON line: {"jobs": N, "seconds": elapsed}.
# Only the pushes are timed (after one PING), not the interpreter's start or the require.

require "json"
require_relative "noop_worker"

# The third argument is the batch size of "bulk", the rate (jobs/s) of "latency".
mode, count, size = ARGV[0], Integer(ARGV[1]), ARGV.fetch(2, "1000")
Sidekiq.redis { |conn| conn.ping }

start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
case mode
when "bulk"
  (0...count).each_slice(Integer(size)) do |slice|
    Sidekiq::Client.push_bulk("class" => NoopWorker, "args" => Array.new(slice.size) { [] })
  end
when "single"
  count.times { NoopWorker.perform_async }
when "latency"
  rate = Float(size)
  count.times do |i|
    delay = start + i / rate - Process.clock_gettime(Process::CLOCK_MONOTONIC)
    sleep(delay) if delay.positive?
    LatencyWorker.perform_async(Time.now.to_f)
  end
else
  abort "unknown mode #{mode.inspect}"
end
seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start

puts JSON.generate({ "jobs" => count, "seconds" => seconds })
