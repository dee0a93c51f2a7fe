# frozen_string_literal: true

# Send quiet! or stop! to every process in Sidekiq::ProcessSet, as the Web UI's buttons do.
#
#   ruby signal.rb quiet|stop
require_relative "common"

action = ARGV.fetch(0)
raise ArgumentError, "quiet or stop, not #{action}" unless %w[quiet stop].include?(action)

processes = Sidekiq::ProcessSet.new.to_a
processes.each { |process| (action == "quiet") ? process.quiet! : process.stop! }
emit(processes.map(&:identity))
