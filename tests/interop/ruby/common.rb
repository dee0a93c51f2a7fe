# frozen_string_literal: true

# Shared by the helper scripts: Sidekiq's client and API pointed at INTEROP_REDIS_URL (the test's
# own Redis database), and `emit` to print one JSON document on stdout for the Python test.
require "base64"
require "json"
require "sidekiq"
require "sidekiq/api"

# redis-rb 4.8 warns about Sidekiq 6.4's use of `sadd` on every push; keep stderr for real errors.
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
Sidekiq.configure_client { |config| config.redis = {url: ENV.fetch("INTEROP_REDIS_URL")} }
Sidekiq.logger.level = Logger::WARN

def emit(value)
  $stdout.write(JSON.generate(value))
  $stdout.flush
end

# The JSON document given on stdin (the Python test writes it).
def input
  JSON.parse($stdin.read)
end
