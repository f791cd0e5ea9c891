pub mod hardware;
