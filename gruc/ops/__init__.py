"""Op builders in the style of popops / poplin / popnn: they only call the IR API."""
