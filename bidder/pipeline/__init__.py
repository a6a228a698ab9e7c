"""The bid pipeline: the context and stage runner, the stages in hot-path order, the
response, supply-path dedup claims, the campaign book and the billing sinks."""
