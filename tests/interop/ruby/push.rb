# frozen_string_literal: true

# Push each job hash read from stdin (a JSON list) with Sidekiq::Client.push; print the jids.
#
#   echo '[{"class": "SomeName", "args": [1, "x"]}]' | ruby push.rb
require_relative "common"

emit(input.map { |item| Sidekiq::Client.push(item) })
