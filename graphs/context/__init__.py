"""What a model sees: the budgeted context, stripping what workmem injected, LangChain messages, search results."""
