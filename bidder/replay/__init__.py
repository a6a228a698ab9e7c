"""The open-loop replayer: sends a bidstream at its recorded pace against a bidder,
plays the exchange (auctions, win and billing notices) and reports latency corrected
for coordinated omission."""
