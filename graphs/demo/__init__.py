"""`workmem demo` and the offline demo agent served to Studio, with the bundled sample session."""
