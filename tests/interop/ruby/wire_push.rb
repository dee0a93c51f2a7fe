# frozen_string_literal: true

# Push jobs the ways Ruby code does, and print the exact bytes Sidekiq wrote for each one.
#
# stdin: a JSON list of cases, each one of
#   {"kind": "client_push", "item": {...}}                               Sidekiq::Client.push(item)
#   {"kind": "perform_async", "worker": "WireWorker", "args": [...], "set": {...}?}
#   {"kind": "perform_in", "worker": "WireWorker", "interval": 60, "args": [...], "set": {...}?}
# stdout: one list per case of what the push left in Redis (then removed, so cases do not mix):
#   [{"key": "queue:default" | "schedule", "raw": <Base64 of the stored bytes>, "score": <float>|null}]
require_relative "common"

class WireWorker
  include Sidekiq::Worker

  def perform(*)
  end
end

class OptionsWorker
  include Sidekiq::Worker
  sidekiq_options queue: "critical", retry: 3, backtrace: 5, tags: ["a", "b"]

  def perform(*)
  end
end

def push(spec)
  case spec.fetch("kind")
  when "client_push"
    Sidekiq::Client.push(spec.fetch("item"))
  when "perform_async", "perform_in"
    worker = Object.const_get(spec.fetch("worker"))
    target = spec.key?("set") ? worker.set(spec["set"].transform_keys(&:to_sym)) : worker
    args = spec.fetch("args")
    (spec["kind"] == "perform_in") ? target.perform_in(spec.fetch("interval"), *args) : target.perform_async(*args)
  else
    raise ArgumentError, "unknown case #{spec.inspect}"
  end
end

def drain(conn)
  stored = conn.zrange("schedule", 0, -1, with_scores: true).map { |raw, score|
    {"key" => "schedule", "raw" => Base64.strict_encode64(raw), "score" => score}
  }
  conn.smembers("queues").sort.each do |queue|
    conn.lrange("queue:#{queue}", 0, -1).reverse_each do |raw|
      stored << {"key" => "queue:#{queue}", "raw" => Base64.strict_encode64(raw), "score" => nil}
    end
    conn.del("queue:#{queue}")
  end
  conn.del("schedule", "queues")
  stored
end

emit(input.map { |spec|
  push(spec)
  Sidekiq.redis { |conn| drain(conn) }
})
