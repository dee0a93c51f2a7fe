# frozen_string_literal: true

# Print what Sidekiq's API (and so its Web UI) sees of the running processes: ProcessSet, Workers
# (the Busy page) and Stats (the dashboard).
require_relative "common"

PROCESS_FIELDS = %w[identity hostname pid started_at tag concurrency queues labels busy beat quiet rss rtt_us].freeze

processes = Sidekiq::ProcessSet.new.map do |process|
  PROCESS_FIELDS.to_h { |name| [name, process[name]] }.merge("stopping" => process.stopping?)
end
workers = Sidekiq::Workers.new.map do |process_id, thread_id, work|
  {"process" => process_id, "thread" => thread_id, "work" => work}
end
stats = Sidekiq::Stats.new
today = Time.now.utc.strftime("%Y-%m-%d")
emit(
  "processes" => processes,
  "workers" => workers,
  "workers_size" => Sidekiq::Workers.new.size,
  "stats" => {
    "processed" => stats.processed,
    "failed" => stats.failed,
    "processes_size" => stats.processes_size,
    "workers_size" => stats.workers_size,
    "processed_today" => Sidekiq::Stats::History.new(1).processed.fetch(today),
    "failed_today" => Sidekiq::Stats::History.new(1).failed.fetch(today)
  }
)
