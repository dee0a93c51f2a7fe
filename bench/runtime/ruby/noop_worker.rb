# frozen_string_literal: true

# The Sidekiq jobs of the bench: a no-op apart from one completion marker, and its latency twin.
#
# Each no-op run appends one byte to the O_APPEND file named by BENCH_MARKER (a single write(2),
# as the AsyncTask job does), so the bench counts finished jobs from the file size without
# adding Redis commands. Loaded by `sidekiq -r ./bench/runtime/ruby/noop_worker.rb` and by enqueue.rb;
# the file is opened only where the variable is set (in workers).
#
# LatencyWorker takes its enqueue time (Time.now.to_f in enqueue.rb) and appends one 16-byte
# record instead, the milliseconds from enqueue to start: the AsyncTask LatencyJob's record.

require "sidekiq"

# Sidekiq 6.4 logs "start" and "done" at INFO for every job; AsyncTask logs nothing per job
# by default. WARN makes both sides do the same work per job.
Sidekiq.logger.level = Logger::WARN
# redis-rb 4.8 (Debian's pairing with Sidekiq 6.4) writes a deprecation warning to stderr on
# every SADD, i.e. on every push; that is an artefact of the packaging, not Sidekiq's cost.
Redis.silence_deprecations = true

marker_path = ENV["BENCH_MARKER"]
# Opened once: a per-job open/close would cost more than the job itself.
BENCH_MARKER = marker_path ? File.open(marker_path, File::WRONLY | File::APPEND | File::CREAT) : nil

class NoopWorker
  include Sidekiq::Worker

  def perform
    BENCH_MARKER.syswrite(".")
  end
end

class LatencyWorker
  include Sidekiq::Worker

  def perform(sent)
    BENCH_MARKER.syswrite(format("%15.6f\n", (Time.now.to_f - sent) * 1000))
  end
end
