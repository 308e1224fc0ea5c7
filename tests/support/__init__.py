"""What the tests share: fixtures' helpers, real servers, signing, waits."""
