from .lstm import LSTM, LSTMCell
from .rnn import RNN

__all__ = ["LSTM", "LSTMCell", "RNN"]
