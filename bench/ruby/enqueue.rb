# frozen_string_literal: true

# Ruby side of the enqueue measurement: `ruby enqueue.rb MODE N BATCH` with REDIS_URL set.
#
# MODE "bulk" calls Sidekiq::Client.push_bulk with BATCH jobs per call, "single" calls
# NoopWorker.perform_async N times. Prints one JSON line: {"jobs": N, "seconds": elapsed}.
# Only the pushes are timed (after one PING), not the interpreter's start or the require.

require "json"
require_relative "noop_worker"

mode, count, batch = ARGV[0], Integer(ARGV[1]), Integer(ARGV.fetch(2, "1000"))
Sidekiq.redis { |conn| conn.ping }

start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
case mode
when "bulk"
  (0...count).each_slice(batch) do |slice|
    Sidekiq::Client.push_bulk("class" => NoopWorker, "args" => Array.new(slice.size) { [] })
  end
when "single"
  count.times { NoopWorker.perform_async }
else
  abort "unknown mode #{mode.inspect}"
end
seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start

puts JSON.generate({ "jobs" => count, "seconds" => seconds })
