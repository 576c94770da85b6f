"""The search both backends share: query planning, term channels, ranking, dates, lemmas, hits."""
