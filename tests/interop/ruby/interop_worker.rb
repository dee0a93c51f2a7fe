# frozen_string_literal: true

# Loaded by a real `sidekiq -r` process (Redis from REDIS_URL). Each job appends what it received
# to the list `interop:ruby-performed`, for the Python test to read.
require "json"
require "sidekiq"

# redis-rb 4.8 warns about Sidekiq 6.4's positional BRPOP timeout and `sadd`; keep the log readable.
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)

# Sidekiq 6.4: poll the schedule about every second instead of every 5-15 s (the first poll
# still waits up to 5 s), so that perform_in tests take seconds.
Sidekiq.options[:poll_interval_average] = 1

class InteropWorker
  include Sidekiq::Worker

  def perform(*args)
    record = {"jid" => jid, "args" => args, "performed_at" => Time.now.to_f}
    Sidekiq.redis { |conn| conn.rpush("interop:ruby-performed", JSON.generate(record)) }
  end
end
