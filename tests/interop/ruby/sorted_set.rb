# frozen_string_literal: true

# Print the entries of Sidekiq::RetrySet / DeadSet / ScheduledSet as Sidekiq's API reads them.
#
#   ruby sorted_set.rb retry|dead|schedule [list|add_to_queue]
#
# `add_to_queue` moves every entry back to its queue (as the Web UI's "Add to queue" button does)
# after printing it.
require_relative "common"

SETS = {"retry" => Sidekiq::RetrySet, "dead" => Sidekiq::DeadSet, "schedule" => Sidekiq::ScheduledSet}.freeze

set = SETS.fetch(ARGV.fetch(0)).new
action = ARGV.fetch(1, "list")
size = set.size
entries = set.map do |entry|
  {
    "klass" => entry.klass,
    "display_class" => entry.display_class,
    "args" => entry.args,
    "jid" => entry.jid,
    "queue" => entry.queue,
    "at" => entry.at.to_f,
    "score" => entry.score,
    "error_message" => entry["error_message"],
    "error_class" => entry["error_class"],
    "retry_count" => entry["retry_count"],
    "failed_at" => entry["failed_at"],
    "retried_at" => entry["retried_at"],
    "error_backtrace" => entry.error_backtrace,
    "created_at" => entry.created_at.to_f,
    "enqueued_at" => entry.enqueued_at&.to_f,
    "item" => entry.item
  }
end
set.each(&:add_to_queue) if action == "add_to_queue"
emit({"size" => size, "entries" => entries})
