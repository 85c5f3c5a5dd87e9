"""Planning: pure functions of the stream lengths, arrays in and arrays out."""
