/* The console page: filled in next. */
